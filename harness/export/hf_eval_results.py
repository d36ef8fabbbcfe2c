"""Hugging Face `.eval_results/` files for a model page (https://huggingface.co/docs/hub/eval-results).

One YAML file per run (the Hub wants each variant of a benchmark score in a file of its own), under
`<out>/<model>/.eval_results/<task>__<run name>.yaml`, holding a one-entry list: `dataset.id` (the benchmark's Hub
dataset), `dataset.task_id`, `value` (the recounted quality, in percent), `date`, and `notes` naming how it was
decoded (decoder, sampler and its knobs, TPF with its interval, device, dtype; a likelihood run: its scoring method
and knobs, no TPF), since the Hub's format has no field for them. The dataset id comes from lm-eval's task config
(`dataset_path`) or from `--hf-dataset EVAL=ID[:TASK]`; a run whose eval has neither is skipped, and the export says
so (our Sudoku sets are no Hub benchmark).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from harness.export.runs import RunRecord


def parse_datasets(pairs: list[str]) -> dict[str, tuple[str, str | None]]:
    """`EVAL=ID[:TASK]` pairs -> {eval name: (hub dataset id, task id)}; a malformed pair fails naming it."""
    out = {}
    for pair in pairs:
        name, _, ref = pair.partition("=")
        if not name or "/" not in ref:
            raise SystemExit(f"--hf-dataset: expected EVAL=ORG/NAME[:TASK], got {pair!r}")
        repo, _, task = ref.partition(":")
        out[name] = (repo, task or None)
    return out


def dataset_of(rec: RunRecord, datasets: dict[str, tuple[str, str | None]]) -> tuple[str, str] | None:
    """(Hub dataset id, task id) of the run's quality, or None."""
    name = str(rec.run.get("eval"))
    if name in datasets:
        repo, task = datasets[name]
        return repo, task or name
    task = str(rec.metrics.get("quality_metric") or "").split("/", 1)[0]
    config = (rec.lm_eval.get("configs") or {}).get(task) or {}
    path = str(config.get("dataset_path") or "")
    return (path, task) if path.count("/") == 1 else None  # a Hub id, not a local loader such as `json`


def scoring_notes(rec: RunRecord) -> str:
    """A likelihood run's notes: how it scored (method and knobs), not a sampler or TPF it never had."""
    knobs = ", ".join(f"{k}={v}" for k, v in rec.scoring.items() if k != "method")
    env = rec.environment
    where = ", ".join(str(env[k]) for k in ("device", "dtype") if env.get(k))
    parts = [f"dgharness {rec.run.get('label')}", f"scored by likelihood: {rec.scoring.get('method')} ({knobs})"]
    return "; ".join(p for p in [*parts, f"{rec.num_samples} questions", where] if p)


def notes(rec: RunRecord) -> str:
    if rec.scoring is not None:
        return scoring_notes(rec)
    sampler = {k: v for k, v in (rec.run.get("sampler") or {}).items() if k != "name"}
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(sampler.items()))
    sampler_text = f"sampler {rec.run['sampler'].get('name')} ({knobs})" if rec.run.get("sampler") else ""
    lo, hi = rec.metrics.get("tpf_lo"), rec.metrics.get("tpf_hi")
    tpf = f"TPF {rec.tpf:.3g}" + (f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "")
    env = rec.environment
    where = ", ".join(str(env[k]) for k in ("device", "dtype") if env.get(k))
    parts = [f"dgharness {rec.run.get('label')}", sampler_text, tpf, f"{rec.num_samples} samples", where]
    return "; ".join(p for p in parts if p)


def eval_result_entry(rec: RunRecord, dataset: tuple[str, str]) -> dict[str, Any]:
    recorded = rec.card.get("recorded_at") or rec.run_dir.stat().st_mtime
    return {
        "dataset": {"id": dataset[0], "task_id": dataset[1]},
        "value": round(100 * float(rec.quality), 4),
        "date": datetime.fromtimestamp(recorded, UTC).date().isoformat(),
        "notes": notes(rec),
    }


def export_hf(records: list[RunRecord], out: Path, datasets: dict[str, tuple[str, str | None]]) -> list[Path]:
    files = []
    for rec in records:
        dataset = dataset_of(rec, datasets)
        if rec.quality is None or dataset is None:
            why = "no quality" if rec.quality is None else "no Hub dataset (pass --hf-dataset EVAL=ORG/NAME[:TASK])"
            print(f"[export hf] skipped {rec.run_dir.name}: {why}")
            continue
        folder = out / str(rec.run.get("model")) / ".eval_results"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{dataset[1]}__{rec.run.get('run_name') or rec.run_dir.name}.yaml"
        path.write_text(yaml.safe_dump([eval_result_entry(rec, dataset)], sort_keys=False, allow_unicode=True))
        files.append(path)
    return files
