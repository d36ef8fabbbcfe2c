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
    num_samples: int
    lm_eval: dict[str, Any] = field(default_factory=dict)  # lm_eval_results.json, for lm-eval runs

    @property
    def run(self) -> dict[str, Any]:
        return self.metrics.get("run") or {}

    @property
    def environment(self) -> dict[str, Any]:
        return self.card.get("environment") or {}


def scored_rows(run_dir: Path, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows the quality is the mean `correct` of: lm-eval's scored rows of the first task, else every sample."""
    path = run_dir / SAMPLES_SCORED
    if not path.is_file():
        return read_samples(run_dir)
    rows = [row for _, row in jsonl_objects(path)]
    first = str(metrics.get("quality_metric") or "").split("/", 1)[0]
    return [r for r in rows if r.get("task") == first] if first else rows


def recount(run_dir: Path, metrics: dict[str, Any]) -> tuple[float, float | None, int]:
    """(TPF, quality, samples) from the samples; `StaleRun` where metrics.json says otherwise."""
    rows = read_samples(run_dir)
    tpf = float(decode_metrics(rows)["tpf"])
    scored = [r for r in scored_rows(run_dir, metrics) if isinstance(r.get("correct"), int | float)]
    quality = sum(float(r["correct"]) for r in scored) / len(scored) if scored else None
    stored = metrics.get("quality")
    if metrics.get("tpf") is not None and not math.isclose(tpf, float(metrics["tpf"]), rel_tol=1e-9):
        raise StaleRun(f"{run_dir}: its samples give TPF {tpf:.6g}, its metrics.json {metrics['tpf']:.6g}")
    if stored is not None and (quality is None or not math.isclose(quality, float(stored), abs_tol=1e-9)):
        raise StaleRun(f"{run_dir}: its samples give quality {quality}, its metrics.json {stored}")
    return tpf, (quality if stored is not None else None), len(rows)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_records(paths: list[str | Path]) -> tuple[list[RunRecord], pd.DataFrame]:
    """Every finished run under `paths` (run dirs or sweep dirs), with the run table they form (its `tpf` and `quality`
    replaced by the recounts, its `model` naming the environment where the runs come from several)."""
    from omegaconf import OmegaConf

    table = collect(paths)
    records = []
    for i, row in table.iterrows():
        run_dir = Path(row["run_dir"])
        metrics = _json(run_dir / "metrics.json")
        tpf, quality, n = recount(run_dir, metrics)
        table.loc[i, ["tpf", "quality"]] = [tpf, math.nan if quality is None else quality]
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
    return records, table
