"""Every Eval Ever (`every-eval-ever`, schema 0.3.0): one aggregate record per run, `<run name>.json`.

Where our figures go in its schema: the eval's quality (lm-eval: each task's metrics) as an accuracy result; TPF as a
result of its own (`metric_id` `dgharness.tokens_per_forward`, its bootstrap 95% interval as the confidence interval)
and tokens/s beside it (hardware-bound: the device is in `model_info.inference_platform`); the decoder and the sampler's
knobs in each result's `generation_config.additional_details` (a likelihood run, lm-eval's multiple-choice tasks:
no TPF or tokens/s, since it generates nothing, and the scoring method and its knobs, `likelihood.*`, in place of the
sampler's) (the schema's `generation_args` admits only its own keys:
temperature, max_tokens, reasoning); the run card's environment in `model_info.additional_details` and
`eval_library.additional_details`; the run's identity (run name, eval id, item hash) in
`source_data.additional_details`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.export.runs import RunRecord

SCHEMA_VERSION = "0.3.0"
TPF_METRIC = "dgharness.tokens_per_forward"
TPS_METRIC = "dgharness.tokens_per_second"


def strings(d: dict[str, Any]) -> dict[str, str]:
    """The schema's `additional_details`: every value a string (JSON for lists and dicts); None dropped."""
    return {str(k): v if isinstance(v, str) else json.dumps(v, default=str) for k, v in d.items() if v is not None}


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat() if ts else None


def model_id(rec: RunRecord) -> tuple[str, bool]:
    """(model_info.id, whether it is a Hub id): the Hub id the weights came from, else `local/<model name>`."""
    ref = str((rec.config.get("model") or {}).get("path") or rec.run.get("model"))
    hub = not (Path(ref).exists() or ref.startswith(("/", ".")) or ref.count("/") != 1)
    return (ref, True) if hub else (f"local/{rec.run.get('model')}", False)


def model_info(rec: RunRecord) -> dict[str, Any]:
    env, run = rec.environment, rec.run
    ref, hub = model_id(rec)
    path = (rec.config.get("model") or {}).get("path")
    decoder = {f"decoder.{k}": v for k, v in (run.get("decoder") or {}).items() if not isinstance(v, dict | list)}
    return {
        "name": str(run.get("model")),
        "id": ref,
        "inference_platform": str(env.get("device") or "unknown"),
        "inference_engine": {"name": "dgharness", "version": str(env.get("git_commit") or "unknown")},
        "additional_details": {
            "deployment_type": "self_deployed",
            "model_availability": "open_weights" if hub else "unknown",
            **strings({"model_path": path, "decoder": run.get("label"), **decoder}),
            **strings({f"env.{k}": v for k, v in env.items()}),
        },
    }


def source_data(rec: RunRecord, task: str | None) -> dict[str, Any]:
    details = strings({"run_name": rec.run.get("run_name"), "eval_id": rec.run.get("eval_id")})
    details |= strings({"items_sha": rec.metrics.get("items_sha"), "prompts": rec.card.get("prompts")})
    config = (rec.lm_eval.get("configs") or {}).get(task or "") or {}
    if config.get("dataset_path"):
        out = {"dataset_name": task, "source_type": "hf_dataset", "hf_repo": str(config["dataset_path"])}
        if split := config.get("test_split"):
            out["hf_split"] = str(split)
        return {**out, "samples_number": rec.num_samples, "additional_details": details}
    return {"dataset_name": str(rec.run.get("eval")), "source_type": "other", "additional_details": details}


def generation_config(rec: RunRecord) -> dict[str, Any]:
    """How the figures were made: the sampler's knobs, or a likelihood run's scoring method and its knobs (no sampler
    runs there, so none is named)."""
    if rec.scoring is not None:
        details = {"decoder": rec.run.get("label"), "seed": rec.run.get("seed")}
        knobs = {f"likelihood.{k}": v for k, v in rec.scoring.items()}
        return {"generation_args": {}, "additional_details": strings({**details, **knobs})}
    sampler = rec.run.get("sampler") or {}
    args: dict[str, Any] = {"max_tokens": int(rec.metrics.get("max_new_tokens") or 1)}
    if isinstance(sampler.get("temperature"), int | float):
        args["temperature"] = float(sampler["temperature"])
    thinking = (rec.config.get("model") or {}).get("enable_thinking")
    if isinstance(thinking, bool):
        args["reasoning"] = thinking
    knobs = {f"sampler.{k}": v for k, v in sampler.items()}
    details = {"decoder": rec.run.get("label"), "seed": rec.run.get("seed")}
    details["batch_size"] = rec.metrics.get("batch_size")
    return {"generation_args": args, "additional_details": strings({**details, **knobs})}


def _result(rec: RunRecord, rid: str, name: str, metric: dict[str, Any], score: dict[str, Any], task=None):
    return {
        "evaluation_result_id": rid,
        "evaluation_name": name,
        "source_data": source_data(rec, task),
        "evaluation_timestamp": _iso(rec.card.get("recorded_at")) or _iso(rec.run_dir.stat().st_mtime),
        "metric_config": {"lower_is_better": False, "score_type": "continuous", **metric},
        "score_details": score,
        "generation_config": generation_config(rec),
    }


def quality_results(rec: RunRecord) -> list[dict[str, Any]]:
    """The run's quality (recounted from its samples), with its binomial standard error; lm-eval: each task's metrics
    as lm-eval aggregated them (the first task's main metric is the recounted quality)."""
    ev, n = str(rec.run.get("eval")), rec.num_samples
    out = []
    if rec.quality is not None:
        se = math.sqrt(rec.quality * (1 - rec.quality) / n) if n else 0.0
        metric = {"metric_id": "accuracy", "metric_name": str(rec.metrics.get("quality_metric") or "accuracy")}
        metric |= {"metric_kind": "accuracy", "metric_unit": "proportion", "min_score": 0, "max_score": 1}
        score = {"score": rec.quality, "uncertainty": {"standard_error": {"value": se, "method": "analytic"}}}
        score["uncertainty"]["num_samples"] = n
        task = str(rec.metrics.get("quality_metric") or "").split("/", 1)[0] or None
        out.append(_result(rec, "quality", ev, metric, score, task))
    for task, figures in (rec.metrics.get("lm_eval") or {}).items():
        for key, value in figures.items():
            if "," not in key or "_stderr" in key or not isinstance(value, int | float):
                continue
            metric = {"metric_id": f"lm_eval.{key.split(',')[0]}", "metric_name": key, "min_score": 0, "max_score": 1}
            out.append(_result(rec, f"lm_eval/{task}/{key}", f"{ev}/{task}", metric, {"score": float(value)}, task))
    return out


def speed_results(rec: RunRecord) -> list[dict[str, Any]]:
    """TPF (device-independent) and tokens/s (this device's), each with its bootstrap 95% interval where stored; none
    for a likelihood run (it generates no token)."""
    out = []
    if rec.scoring is not None:
        return out
    figures = ((TPF_METRIC, "tokens per forward (TPF)", "tpf", rec.tpf),)
    figures += ((TPS_METRIC, "tokens per second", "tokens_per_second", rec.metrics.get("tokens_per_second")),)
    for metric_id, name, key, value in figures:
        if not isinstance(value, int | float):
            continue
        score: dict[str, Any] = {"score": float(value), "uncertainty": {"num_samples": rec.num_samples}}
        lo, hi = rec.metrics.get(f"{key}_lo"), rec.metrics.get(f"{key}_hi")
        if lo is not None and hi is not None:
            ci = {"lower": lo, "upper": hi, "confidence_level": 0.95, "method": "bootstrap over samples"}
            score["uncertainty"]["confidence_interval"] = ci
        metric = {"metric_id": metric_id, "metric_name": name, "metric_unit": "tokens", "min_score": 0}
        metric["max_score"] = "Infinity"
        out.append(_result(rec, key, f"{rec.run.get('eval')} / {name}", metric, score))
    return out


def eee_record(rec: RunRecord, organization: str, relationship: str, retrieved: float | None = None) -> dict[str, Any]:
    """One run as an Every Eval Ever aggregate record (see the module docstring for where each figure goes)."""
    env, run = rec.environment, rec.run
    lm_eval = bool(rec.lm_eval)
    retrieved = time.time() if retrieved is None else retrieved
    harness = strings({"harness": "dgharness", "commit": env.get("git_commit"), "dirty": env.get("git_dirty")})
    library = {"name": "lm_eval" if lm_eval else "dgharness", "additional_details": harness}
    library["version"] = str((env.get("lm_eval") if lm_eval else env.get("git_commit")) or "unknown")
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": f"{run.get('eval')}/{run.get('model')}/{run.get('run_name')}",
        "evaluation_timestamp": _iso(rec.card.get("recorded_at")) or _iso(rec.run_dir.stat().st_mtime),
        "retrieved_timestamp": str(int(retrieved)),
        "source_metadata": {
            "source_name": f"dgharness run {run.get('run_name')}",
            "source_type": "evaluation_run",
            "source_organization_name": organization,
            "evaluator_relationship": relationship,
            "additional_details": strings({"run_dir": str(rec.run_dir)}),
        },
        "model_info": model_info(rec),
        "eval_library": library,
        "evaluation_results": quality_results(rec) + speed_results(rec),
    }


def datastore_path(rec: RunRecord) -> Path:
    """Where the Every Eval Ever datastore files a record: `data/<eval>/<developer>/<model>/<uuid4>.json` (the uuid
    derived from the run name, so a re-export overwrites its own file)."""
    developer, model = model_id(rec)[0].split("/", 1)
    digest = hashlib.sha256(str(rec.run.get("run_name") or rec.run_dir.name).encode()).digest()
    name = uuid.UUID(bytes=digest[:16], version=4)
    return Path("data") / str(rec.run.get("eval")) / developer / model.replace("/", "_") / f"{name}.json"


def export_eee(records: list[RunRecord], out: Path, organization: str, relationship: str) -> list[Path]:
    files = []
    for rec in records:
        path = out / datastore_path(rec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(eee_record(rec, organization, relationship), indent=2) + "\n")
        files.append(path)
    return files
