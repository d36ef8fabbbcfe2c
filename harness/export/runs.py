"""What every export reads from a run dir: its metrics, config, run card and samples, with the figures the exports
publish recounted from the samples themselves (never copied from metrics.json alone), so an export states what the
stored samples say and refuses a run whose metrics.json disagrees with them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from contract.files import jsonl_objects
from contract.records import decode_metrics
from harness.analysis.aggregate import collect
from harness.runner.run_card import read_card
from harness.runner.store import read_samples

SAMPLES_SCORED = "samples_scored.jsonl"  # lm-eval runs: the decode rows joined with lm-eval's scores (evals.lmeval)
LM_EVAL_RESULTS = "lm_eval_results.json"


class StaleRun(ValueError):
    """A run whose metrics.json disagrees with its own samples: an export would publish numbers nobody can recount."""


@dataclass
class RunRecord:
    """One finished run as the exports see it (`row`: its line of the run table, `harness.analysis.aggregate`)."""

    run_dir: Path
    row: dict[str, Any]
    metrics: dict[str, Any]
    card: dict[str, Any]
    config: dict[str, Any]
    tpf: float  # recounted from the samples: total valid tokens / total forwards
    quality: float | None  # recounted from the samples: mean `correct` (lm-eval: the first task's rows)
    num_samples: int  # the samples the quality is the mean of (a likelihood run: its questions)
    lm_eval: dict[str, Any] = field(default_factory=dict)  # lm_eval_results.json, for lm-eval runs

    @property
    def run(self) -> dict[str, Any]:
        return self.metrics.get("run") or {}

    @property
    def environment(self) -> dict[str, Any]:
        return self.card.get("environment") or {}

    @property
    def scoring(self) -> dict[str, Any] | None:
        """A likelihood-only run's scoring (method and knobs, `evals.lmeval.likelihood.scoring_report`): its quality
        comes from scores, not from decoding, so it has no TPF or tokens/s and no sampler ran; None otherwise."""
        return likelihood_only(self.metrics)


def likelihood_only(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The scorer's description of a run whose every request was a loglikelihood one, else None."""
    scoring = metrics.get("likelihood")
    return scoring if isinstance(scoring, dict) and metrics.get("sampler_used") is False else None


def row_task(row: dict[str, Any]) -> str:
    """The lm-eval task of a scored row: its `task`, else its sample id's first part (`<task>/<doc_id>[/...]`; the
    likelihood rows of runs made before they carried `task`)."""
    return str(row.get("task") or str(row.get("sample_id", "")).split("/", 1)[0])


def scored_rows(run_dir: Path, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows the quality is the mean `correct` of: lm-eval's scored rows of the first task (one per generated
    reply, one per multiple-choice question), else every sample."""
    path = run_dir / SAMPLES_SCORED
    if not path.is_file():
        return read_samples(run_dir)
    rows = [row for _, row in jsonl_objects(path)]
    first = str(metrics.get("quality_metric") or "").split("/", 1)[0]
    return [r for r in rows if row_task(r) == first] if first else rows


def recount(run_dir: Path, metrics: dict[str, Any]) -> tuple[float, float | None, int]:
    """(TPF, quality, samples the quality is the mean of) from the samples; `StaleRun` where metrics.json says
    otherwise. TPF counts the generated rows only (a likelihood request generates nothing; lm-eval's metrics.json
    counts them the same way)."""
    generated = [r for r in read_samples(run_dir) if r.get("request") != "loglikelihood"]
    tpf = float(decode_metrics(generated)["tpf"])
    scored = [r for r in scored_rows(run_dir, metrics) if isinstance(r.get("correct"), int | float)]
    quality = sum(float(r["correct"]) for r in scored) / len(scored) if scored else None
    stored = metrics.get("quality")
    if metrics.get("tpf") is not None and not math.isclose(tpf, float(metrics["tpf"]), rel_tol=1e-9):
        raise StaleRun(f"{run_dir}: its samples give TPF {tpf:.6g}, its metrics.json {metrics['tpf']:.6g}")
    if stored is not None and (quality is None or not math.isclose(quality, float(stored), abs_tol=1e-9)):
        raise StaleRun(f"{run_dir}: its samples give quality {quality}, its metrics.json {stored}")
    return tpf, (quality if stored is not None else None), len(scored) if scored else len(generated)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_records(paths: list[str | Path]) -> tuple[list[RunRecord], pd.DataFrame]:
    """Every finished run under `paths` (run dirs or sweep dirs), with the run table they form (its `tpf` and `quality`
    replaced by the recounts, its `model` naming the environment where the runs come from several, its `scoring` the
    method of a likelihood-only run)."""
    from omegaconf import OmegaConf

    table = collect(paths)
    records, scoring = [], []
    for i, row in table.iterrows():
        run_dir = Path(row["run_dir"])
        metrics = _json(run_dir / "metrics.json")
        tpf, quality, n = recount(run_dir, metrics)
        table.loc[i, ["tpf", "quality"]] = [tpf, math.nan if quality is None else quality]
        scoring.append((likelihood_only(metrics) or {}).get("method"))
        saved = run_dir / "config.yaml"
        config = OmegaConf.to_container(OmegaConf.load(saved)) if saved.is_file() else {}
        records.append(
            RunRecord(
                run_dir=run_dir,
                row=row.to_dict(),
                metrics=metrics,
                card=read_card(run_dir) or {},
                config=config or {},
                tpf=tpf,
                quality=quality,
                num_samples=n,
                lm_eval=_json(run_dir / LM_EVAL_RESULTS),
            )
        )
    table["scoring"] = pd.Series(scoring, index=table.index, dtype=object)  # a likelihood-only run's method
    return records, table
