"""The two estimates `bench.gpu.gpu_check` holds its run against, both made without running the model:
`memory_plan` (which batch sizes fit: `models.planning.memory`'s decode-peak estimate against the device's memory, so a
batch that cannot fit is dropped with a note instead of an OOM) and `versus_plan` (the measured parts beside
`make gpu-plan`'s cost-model predictions for this GPU: `bench.gpu.gpu_plan`, `bench.gpu.cost_model`).
`cfg` is a `bench.gpu.gpu_check.CheckConfig` (not imported: that module imports this one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from bench.gpu.gpu_device import is_cuda

# ---------------------------------------------------------------------------------------------- memory plan


def memory_plan(model, cfg, parameters: int) -> dict[str, Any]:
    """Which batch sizes fit, from `models.planning.memory`'s estimate of the engine's decode peak (and generate()'s,
    whose logits temporaries are larger), against the device's memory: free now plus what this process holds
    (the weights), or `memory_budget_gib`."""
    from models.planning.memory import (
        DTYPE_BYTES,
        GIB,
        estimate_decode_peak,
        free_memory_bytes,
        largest_batch_that_fits,
    )

    dtype_bytes = DTYPE_BYTES[cfg.dtype]
    c = model.config.canvas_length
    if cfg.memory_budget_gib is not None:
        total, source = int(cfg.memory_budget_gib * GIB), "memory_budget_gib"
    elif is_cuda(cfg.device):
        total = free_memory_bytes(cfg.device) + torch.cuda.memory_reserved()
        source = "cuda free + reserved by this process"
    else:
        total, source = free_memory_bytes(cfg.device) + parameters * dtype_bytes, "MemAvailable + weights"
    budget = cfg.headroom * total
    context_tokens = cfg.context + cfg.canvases * c  # the longest context any phase reaches
    kw = dict(parameters=parameters, prompt_tokens=cfg.context)
    rows, notes = [], []
    for b in sorted(set(cfg.batches) | {cfg.agree_requests}):
        ours = estimate_decode_peak(model.config, b, context_tokens, c, dtype_bytes, **kw)
        theirs = estimate_decode_peak(
            model.config, b, context_tokens, c, dtype_bytes, logits_factor=cfg.generate_logits_factor, **kw
        )
        rows.append(
            {
                "batch": b,
                "engine_estimate_gib": ours.total / GIB,
                "engine_fits": ours.total <= budget,
                "engine_phase": ours.phase,
                "generate_estimate_gib": theirs.total / GIB,
                "generate_fits": theirs.total <= budget,
            }
        )
    fits = {r["batch"]: r for r in rows}
    batches = [b for b in cfg.batches if fits[b]["engine_fits"]]
    generate_batches = [b for b in batches if fits[b]["generate_fits"]]
    for b in cfg.batches:
        if b not in batches:
            notes.append(
                f"batch {b} dropped: estimated {fits[b]['engine_estimate_gib']:.1f} GiB > {budget / GIB:.1f} GiB budget"
            )
        elif b not in generate_batches:
            notes.append(
                f"generate() at batch {b} skipped: estimated {fits[b]['generate_estimate_gib']:.1f} GiB "
                f"> {budget / GIB:.1f} GiB budget"
            )
    try:
        largest = largest_batch_that_fits(
            model.config, context_tokens, c, dtype_bytes, total, max_batch=1024, headroom=cfg.headroom, **kw
        )
    except ValueError:
        largest = 0
    agree_n = cfg.agree_requests if fits[cfg.agree_requests]["engine_fits"] else min(cfg.agree_requests, largest)
    if agree_n != cfg.agree_requests:
        notes.append(f"agreement check with {agree_n} requests: {cfg.agree_requests} do not fit")
    return {
        "total_gib": total / GIB,
        "source": source,
        "headroom": cfg.headroom,
        "budget_gib": budget / GIB,
        "context_tokens": context_tokens,
        "rows": rows,
        "batches": batches,
        "generate_batches": generate_batches,
        "largest_batch_that_fits": largest,
        "agree_requests": agree_n,
        "notes": notes,
    }


# ---------------------------------------------------------------------------------------------- vs the plan

PLAN_DENOISE_PARTS = ("attention", "moe", "mlp", "lm_head", "other")  # what `denoise_ms` runs
PLAN_COLUMNS = ["part", "batch", "context", "plan_context", "measured_ms", "predicted_ms", "measured_over_predicted"]


def plan_gpu(name: str | None) -> str | None:
    """The cost model's GPU (`bench.gpu.gpu_specs.GPUS` key) for a CUDA device name, None for any other device."""
    from bench.gpu.gpu_specs import GPUS

    return next((key for key in GPUS if name and key in name.lower()), None)


def versus_plan(payload: dict[str, Any], plan_path: str | Path) -> list[dict[str, Any]]:
    """The measured parts beside `make gpu-plan`'s predictions (its JSON, written beforehand on any machine) for
    this GPU: the forward (decoder + LM head, eager), self-conditioning (denoise_selfcond - denoise), one AR
    token of the same weights, and the sampler step (the fused kernel: the plan's `sampler` part). The plan's
    row at the same batch and the nearest context; its GPU-only part times (no host time)."""
    path = Path(plan_path)
    key = plan_gpu(payload.get("machine", {}).get("gpu"))
    if key is None or not path.is_file():
        return []
    results = json.loads(path.read_text())["results"].get(key)
    if not results:
        return []

    def plan_row(b: int, ctx: int):
        rows = [r for r in results["rows"] if r["batch"] == b]
        return min(rows, key=lambda r: abs(r["context"] - ctx)) if rows else None

    def part_ms(variant: dict, parts) -> float:
        return sum(variant["parts"][p]["ms"] for p in parts if p in variant["parts"])

    out = []
    for f in payload.get("forward", []):
        r = plan_row(f["batch"], f["context"])
        if r is None:
            continue
        cur, ar = r["variants"]["current"], r["variants"]["ar_same"]
        pairs = {
            "forward": (f["denoise_ms"], part_ms(cur, PLAN_DENOISE_PARTS)),
            "selfcond": (f["denoise_selfcond_ms"] - f["denoise_ms"], part_ms(cur, ("selfcond",))),
            "ar_token": (f["ar_token_ms"], ar["gpu_ms"]),
        }
        for part, (measured, predicted) in pairs.items():
            out.append(_vs(part, f["batch"], f["context"], r["context"], measured, predicted))
    for srow in payload.get("sampler", []):
        r = plan_row(srow["batch"], 0)
        if r is None or srow.get("fused_bf16_s") is None:
            continue
        predicted = part_ms(r["variants"]["current"], ("sampler",))
        out.append(_vs("sampler", srow["batch"], None, r["context"], 1e3 * srow["fused_bf16_s"], predicted))
    return out


def _vs(part, b, ctx, plan_ctx, measured: float, predicted: float) -> dict[str, Any]:
    ratio = measured / predicted if predicted > 0 else float("nan")
    return {
        "part": part,
        "batch": b,
        "context": ctx,
        "plan_context": plan_ctx,
        "measured_ms": measured,
        "predicted_ms": predicted,
        "measured_over_predicted": ratio,
    }
