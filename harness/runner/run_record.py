"""What a finished run records about itself: the `run` block of metrics.json, the config it saves, its log line."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from evals.decode_order import ar_like_note

log = logging.getLogger(__name__)


def saved_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as config.yaml keeps it: every family's sampler (AR: its token rule) shaped its samples."""
    return OmegaConf.to_container(cfg, resolve=True)


def report_values(report: DictConfig | None, model: DictConfig, label: str) -> dict[str, Any] | None:
    """What a `report_*` preset says this run should measure: `report.expected` keyed by model name (wins) or by
    decoder label (`<label>+lora` for a model with a LoRA adapter), e.g. `{figure: ..., where: ..., values:
    {quality: 0.732}}`; None when it says nothing about this run."""
    if not report:
        return None
    by_key = report.get("expected") or {}
    expected = by_key.get(model.name, by_key.get(f"{label}+lora" if model.get("adapter") else label))
    if expected is None:
        return None
    return {
        "figure": report.get("figure"),
        "where": report.get("where"),
        "values": OmegaConf.to_container(expected, resolve=True),
    }


def run_info(cfg: DictConfig, ev, sampler, label: str, info: dict, metrics: dict) -> dict[str, Any]:
    """The `run` block: names, the decoder's description, the sampler's knobs (every family's), what a report
    preset expects, and the eval id runs are compared on (where it ran is added by the entry point)."""
    out = {
        "run_name": cfg.run_name,
        "label": label,
        "model": cfg.model.name,
        "eval": ev.name,
        "sampler": sampler.knobs(),
        "seed": cfg.seed,
        "decoder": info,
    }
    if expected := report_values(cfg.get("report"), cfg.model, label):
        out["report"] = expected
    # runs are compared (fronts, front_area, aup_d3llm) only on the same items: eval name, item count, item hash
    out["eval_id"] = f"{ev.name}-n{metrics['num_samples']}-{metrics.get('items_sha', 'unknown')[:6]}"
    return out


def log_summary(run_name: str, metrics: dict, run_dir) -> None:
    lo_hi = (f"{metrics[k]:.3f}" if metrics.get(k) is not None else "-" for k in ("tpf_lo", "tpf_hi"))
    log.info(
        "%s: quality=%s tpf=%.3f [%s, %s] step-cap share %.3g nfe=%d tok/s=%.1f%s -> %s",
        run_name,
        metrics.get("quality"),
        metrics["tpf"],
        *lo_hi,
        metrics.get("step_cap_hit_rate", 0.0),
        metrics["nfe"],
        metrics["tokens_per_second"],
        ar_like_note(metrics),  # evals.decode_order: decoding that is effectively left to right
        run_dir,
    )
