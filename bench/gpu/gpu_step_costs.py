"""The cost of one decoding step's parts on the device, for `bench.gpu.gpu_check`: the forward (`forward_costs`:
`adapter.denoise` without / with self-conditioning vs one AR token forward, `ar_token_forward`, on the same
cache, and the MoE experts each touches), and the columns of the per-step tables: the forward's, the sampler
step's (`bench.cpu.sampler_step_bench.bench_one`'s rows) and the compiled step's
(`bench.cpu.step_graph_bench.compare`'s rows).
Whole decoding runs are in `bench.gpu.gpu_engine_runs`; `bench.gpu.plan_profile` reuses `ar_token_forward`.
`cfg` is a `bench.gpu.gpu_check.CheckConfig` (not imported: that module imports this one)."""

from __future__ import annotations

from typing import Any

import torch

from bench.cpu.common import interleaved, median
from bench.gpu.gpu_device import memory_gib, random_prompts, reset_peak_memory
from models.instruments.expert_counter import ExpertCounter

FORWARD_COLUMNS = [
    "batch",
    "context",
    "canvas",
    "denoise_ms",
    "denoise_selfcond_ms",
    "ar_token_ms",
    "ar_token_no_head_ms",
    "denoise_over_ar",
    "denoise_selfcond_over_ar",
    "denoise_over_ar_no_head",
    "experts_per_layer_denoise",
    "experts_per_layer_ar",
    "experts_per_layer_denoise_batch",
    "experts_per_layer_ar_batch",
]
SAMPLER_COLUMNS = [
    "batch",
    "canvas",
    "vocab",
    "reference_s",
    "ours_s",
    "ours_net_s",
    "fused_s",
    "fused_bf16_s",
    "ratio_of_medians",
    "fused_ratio_of_medians",
    "argmax_agree_ours",
    "argmax_agree_fused",
    "argmax_agree_fused_bf16",
    "fused_skipped",
]
COMPILED_COLUMNS = [
    "batch",
    "eager_host_ops",
    "compiled_host_ops",
    "eager_ms",
    "compiled_ms",
    "speedup",
    "compile_s",
    "graphs",
    "graph_breaks",
    "max_logits_diff",
    "same_tokens",
]


def _timed(fns: dict, repeats: int, device: str, warmup: int = 1) -> dict[str, list[float]]:
    return interleaved(fns, repeats=repeats, warmup=warmup, device=device)


@torch.no_grad()
def ar_token_forward(adapter, state, token: torch.Tensor, lm_head: bool = True):
    """One AR decode step on the cache: a 1-token causal encoder forward that appends to it (`adapter.commit`
    of a one-token canvas), then, as an AR model's forward does, the LM head over that token (V logits per row),
    float32 and the final soft cap. Returns (new state, logits or hidden state)."""
    rows = list(range(token.shape[0]))
    new = adapter.commit(state, token, rows)
    if not lm_head:
        return new, torch.stack([new.last_hidden[r] for r in rows])[:, None]
    return new, adapter.next_token_logits(new, rows)


@torch.no_grad()
def forward_costs(adapter, b: int, cfg, fused: bool) -> dict[str, Any]:
    """`adapter.denoise` (decoder + LM head; without / with self-conditioning) vs one AR token forward (with and
    without its LM head), on the same cache. The logits buffers are the engine's: model dtype on the fused path,
    float32 on the torch path."""
    dev, v, c = cfg.device, adapter.vocab_size, adapter.canvas_length
    reset_peak_memory(dev)
    state = adapter.prefill(random_prompts(v, b, [cfg.context] * b, seed=b))
    canvas = torch.randint(0, v, (b, c), generator=torch.Generator().manual_seed(b)).to(dev)
    masks = adapter.canvas_masks(state, c)
    raw = torch.empty(b, c, v, dtype=adapter.dtype if fused else torch.float32, device=dev)
    with ExpertCounter(adapter.model) as counter:  # hooks only around the counted calls, never the timed ones
        adapter.denoise(state, canvas, masks, None, out=raw)
    experts_denoise = counter.summary()["denoise"]
    if fused:  # the kernel writes the processed logits to a separate model-dtype buffer
        sc = torch.empty(b, c, v, dtype=adapter.dtype, device=dev)
        sc.copy_(raw)
    else:  # the torch path processes the workspace in place and feeds it back
        sc = raw
    every = [True] * b
    times = _timed(
        {
            "denoise": lambda: adapter.denoise(state, canvas, masks, None, out=raw),
            "denoise_selfcond": lambda: adapter.denoise(state, canvas, masks, sc, every, out=raw),
        },
        cfg.repeats,
        dev,
    )
    mem_denoise = memory_gib(dev)
    sc = raw = None  # free the logits buffers before the AR steps
    holder = {"state": state}
    token = torch.randint(3, v, (b, 1), generator=torch.Generator().manual_seed(b + 1)).to(dev)

    def ar_step(head: bool):
        holder["state"], _ = ar_token_forward(adapter, holder["state"], token, lm_head=head)

    with ExpertCounter(adapter.model) as counter:
        ar_step(True)  # a one-token causal forward: kind "ar"
    experts_ar = counter.summary()["ar"]
    ar = _timed({"ar": lambda: ar_step(True), "ar_no_head": lambda: ar_step(False)}, cfg.repeats, dev)
    row = {
        "batch": b,
        "context": cfg.context,
        "canvas": c,
        "logits_dtype": str(adapter.dtype if fused else torch.float32),
        "denoise_ms": 1e3 * median(times["denoise"]),
        "denoise_selfcond_ms": 1e3 * median(times["denoise_selfcond"]),
        "ar_token_ms": 1e3 * median(ar["ar"]),
        "ar_token_no_head_ms": 1e3 * median(ar["ar_no_head"]),
    }
    row["denoise_over_ar"] = row["denoise_ms"] / row["ar_token_ms"]
    row["denoise_selfcond_over_ar"] = row["denoise_selfcond_ms"] / row["ar_token_ms"]
    row["denoise_over_ar_no_head"] = row["denoise_ms"] / row["ar_token_no_head_ms"]  # the old, overstated figure
    row["lm_head_share_of_ar"] = 1.0 - row["ar_token_no_head_ms"] / row["ar_token_ms"]
    row.update(
        {
            # distinct experts per layer (mean over layers) touched by one row's tokens (the report's ~84 of 128
            # per denoiser forward vs 8 per AR token) and by the whole batch's tokens (what the forward must read)
            "experts_per_layer_denoise": experts_denoise["per_row"]["mean"],
            "experts_per_layer_ar": experts_ar["per_row"]["mean"],
            "experts_per_layer_denoise_batch": experts_denoise["mean"],
            "experts_per_layer_ar_batch": experts_ar["mean"],
            "experts_denoise_per_layer": experts_denoise["per_row"]["per_layer_mean"],
            **{f"denoise_{k}": val for k, val in mem_denoise.items()},
        }
    )
    return row
