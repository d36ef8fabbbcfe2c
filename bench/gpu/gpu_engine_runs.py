"""Whole decoding runs through the engine, for `bench.gpu.gpu_check`: the loop overhead (`loop_overhead`: the engine
as the harness runs it vs the bare model calls it makes vs transformers' `generate()`; `projected_loop_s`
estimates its wall for the deadline) and B=1 vs B=n token agreement (`batch_agreement`, with
`first_step_logits` for the size of the numeric difference), with the helpers they share (`engine_sampler`,
`counting_calls`) and the columns of their tables. One step's costs are in `bench.gpu.gpu_step_costs`.
`cfg` is a `bench.gpu.gpu_check.CheckConfig` (not imported: that module imports this one)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Any

import torch

from bench.cpu.common import interleaved, median
from bench.gpu.gpu_device import memory_gib, random_prompts, reset_peak_memory

# A mean entropy no real distribution goes below: the stop check runs every step but never fires, so every
# contender of the loop-overhead runs makes the same number of forwards.
NEVER_STOP = 1e-30

LOOP_COLUMNS = [
    "batch",
    "steps",
    "canvases",
    "sampling",
    "bare_s",
    "engine_s",
    "engine_overhead",
    "engine_overhead_ms_per_step",
    "generate_s",
    "generate_overhead",
    "generate_over_engine",
    "nfe_ok",
    "calls_match",
    "peak_gib",
    "generate_peak_gib",
]
AGREE_COLUMNS = [
    "requests",
    "max_steps",
    "sampling",
    "same_tokens_share",
    "same_position_share",
    "same_nfe_share",
    "first_step_logits_max_abs_diff",
    "first_step_same_argmax_share",
    "alone_s",
    "together_s",
]


@contextmanager
def counting_calls(adapter, calls: Counter, names=("prefill", "denoise", "commit")):
    """Count the adapter's model calls (instance attributes shadow the methods while counting)."""

    def wrap(name, fn):
        def call(*a, **k):
            calls[name] += 1
            return fn(*a, **k)

        return call

    for name in names:
        setattr(adapter, name, wrap(name, getattr(adapter, name)))
    try:
        yield calls
    finally:
        for name in names:
            delattr(adapter, name)


def engine_sampler(cfg, **knobs):
    """The harness's default sampler (entropy bound, linear 0.8 -> 0.4, adaptive stop, self-conditioning,
    draw="fast": the fused kernel on CUDA), with `knobs` changed; `cfg.draw` overrides the draw."""
    from samplers.config import EntropyBoundConfig

    return EntropyBoundConfig(**knobs, **({"draw": cfg.draw} if cfg.draw else {}))


@torch.no_grad()
def _bare_calls(adapter, prompts: list[list[int]], cfg, fused: bool):
    """The engine's model calls for `cfg.canvases` canvases of `cfg.steps` steps (the same prefill + denoise +
    commit calls, self-conditioning buffers included), without sampling: the loop's floor."""
    dev, v, c, s, k, b = cfg.device, adapter.vocab_size, adapter.canvas_length, cfg.steps, cfg.canvases, len(prompts)
    sc_dtype = adapter.dtype if fused else torch.float32

    def bare():
        state = adapter.prefill(prompts)
        raw = torch.empty(b, c, v, dtype=sc_dtype, device=dev)
        sc = torch.zeros(b, c, v, dtype=adapter.dtype, device=dev) if fused else raw
        canvas = torch.randint(0, v, (b, c), device=dev)
        every = [True] * b
        for kk in range(k):
            masks = adapter.canvas_masks(state, c)
            for step in range(s):
                adapter.denoise(state, canvas, masks, sc if step else None, every if step else None, out=raw)
            if kk < k - 1:
                state = adapter.commit(state, canvas)

    return bare


def _generate_once(adapter, hf, dev) -> tuple[int, str | None, dict[str, Any]]:
    """One counted run of `generate()`: (decoder forwards, why it was skipped or None, its memory figures). An
    out-of-memory is recorded, not raised: generate() holds far more logits than the engine, keep the rest."""
    forwards, skipped, memory = 0, None, {}
    reset_peak_memory(dev)

    def count(*_):
        nonlocal forwards
        forwards += 1

    handle = adapter.model.model.decoder.register_forward_pre_hook(count)
    try:
        hf()
        memory = memory_gib(dev)
    except torch.OutOfMemoryError as e:
        skipped = f"out of memory ({str(e).splitlines()[0][:160]})"
        reset_peak_memory(dev)
    finally:
        handle.remove()
    return forwards, skipped, memory


def loop_overhead(adapter, cfg, b: int, with_generate: bool) -> dict[str, Any]:
    """Wall of `canvases` canvases at `steps` fixed steps each: the engine as the harness runs it vs the bare
    model calls it makes (the same prefill + denoise + commit calls, self-conditioning buffers included, no
    sampling) vs transformers' `generate()` at the same batch (its adaptive stop kept from firing)."""
    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder

    dev, v, c, s, k = cfg.device, adapter.vocab_size, adapter.canvas_length, cfg.steps, cfg.canvases
    prompts = random_prompts(v, b, [cfg.context] * b, seed=7)
    reqs = [GenerationRequest(f"r{i}", prompts[i], seed=i, max_new_tokens=k * c) for i in range(b)]
    dec = BlockDiffusionDecoder(adapter, engine_sampler(cfg, max_steps=s, stop_entropy=NEVER_STOP))

    def engine():
        return list(dec.stream(reqs, batch_size=b))

    bare = _bare_calls(adapter, prompts, cfg, dec.fused)
    ids = torch.tensor(prompts, device=dev)
    unreachable = adapter.vocab_size  # no sampled token ends a row early

    def hf():
        adapter.model.generate(
            ids,
            max_new_tokens=k * c,
            max_denoising_steps=s,
            confidence_threshold=NEVER_STOP,
            pad_token_id=adapter.pad_id,
            eos_token_id=unreachable,
        )

    reset_peak_memory(dev)
    # one counted run of each contender (also the warm-up: Triton compile, cuBLAS/grouped-mm heuristics)
    engine_calls, bare_calls = Counter(), Counter()
    with counting_calls(adapter, engine_calls):
        results = engine()
    engine_memory = memory_gib(dev)  # the engine's own peak: bare() and generate() run after it
    with counting_calls(adapter, bare_calls):
        bare()
    hf_forwards, generate_skipped, generate_memory = 0, None, {}
    if with_generate:
        hf_forwards, generate_skipped, generate_memory = _generate_once(adapter, hf, dev)
        with_generate = generate_skipped is None
    fns = {"bare": bare, "engine": engine, **({"generate": hf} if with_generate else {})}
    try:
        times = interleaved(fns, repeats=cfg.loop_repeats, warmup=0, device=dev)
    except torch.OutOfMemoryError as e:  # in generate()'s timed runs (a fragmented pool): time the other two
        if not with_generate:
            raise
        with_generate, generate_skipped = False, f"out of memory in its timed runs ({str(e).splitlines()[0][:160]})"
        reset_peak_memory(dev)
        fns.pop("generate")
        times = interleaved(fns, repeats=cfg.loop_repeats, warmup=0, device=dev)
    base, n_steps = median(times["bare"]), k * s
    row: dict[str, Any] = {
        "batch": b,
        "steps": s,
        "canvases": k,
        "sampling": "fused kernel" if dec.fused else f"torch draw_{dec.sampler.draw}",
        "engine_calls": dict(engine_calls),
        "calls_match": engine_calls == bare_calls,
        "nfe_ok": len(results) == b and all(r.nfe == n_steps and r.encoder_forwards == k for r in results),
        "bare_s": base,
        "engine_s": median(times["engine"]),
    }
    row["engine_overhead"] = row["engine_s"] / base - 1.0
    row["engine_overhead_ms_per_step"] = 1e3 * (row["engine_s"] - base) / n_steps
    if generate_skipped:
        row["generate_skipped"] = generate_skipped
    if with_generate:
        row["generate_s"] = median(times["generate"])
        row["generate_overhead"] = row["generate_s"] / base - 1.0
        row["generate_overhead_ms_per_step"] = 1e3 * (row["generate_s"] - base) / n_steps
        row["generate_over_engine"] = row["generate_s"] / row["engine_s"]
        row["generate_forwards_ok"] = hf_forwards == n_steps
    row.update(engine_memory)  # peak_gib: the engine's, as `engine_estimate_gib` plans it
    if generate_memory:
        row["generate_peak_gib"] = generate_memory["peak_gib"]
    row["rounds"] = times
    return row


@torch.no_grad()
def batch_agreement(adapter, cfg, n: int) -> dict[str, Any]:
    """The same `n` requests (mixed prompt lengths) decoded one at a time and all together through the engine
    with the default sampler: share of samples with identical tokens, of identical positions, of equal NFE."""
    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder

    v, c = adapter.vocab_size, adapter.canvas_length
    gap = max(1, cfg.context // (2 * n))
    lengths = [max(1, cfg.context - i * gap) for i in range(n)]
    prompts = random_prompts(v, n, lengths, seed=11)
    reqs = [GenerationRequest(f"a{i}", prompts[i], seed=100 + i, max_new_tokens=c) for i in range(n)]
    dec = BlockDiffusionDecoder(adapter, engine_sampler(cfg, max_steps=cfg.agree_max_steps))
    t0 = time.perf_counter()
    alone = [list(dec.stream([r], batch_size=1))[0] for r in reqs]
    t1 = time.perf_counter()
    together = {r.sample_id: r for r in dec.stream(reqs, batch_size=n)}
    t2 = time.perf_counter()
    first = first_step_logits(adapter, reqs)
    same, positions, same_nfe = [], [], []
    for a in alone:
        t = together[a.sample_id]
        same.append(a.token_ids == t.token_ids)
        width = max(len(a.token_ids), len(t.token_ids), 1)
        positions.append(sum(x == y for x, y in zip(a.token_ids, t.token_ids)) / width)
        same_nfe.append(a.nfe == t.nfe)
    return {
        "requests": n,
        "batch_together": n,
        "max_steps": cfg.agree_max_steps,
        "prompt_lengths": lengths,
        "sampling": "fused kernel" if dec.fused else f"torch draw_{dec.sampler.draw}",
        "same_tokens_share": sum(same) / n,
        "same_position_share": sum(positions) / n,
        "same_nfe_share": sum(same_nfe) / n,
        "nfe_alone": [a.nfe for a in alone],
        "nfe_together": [together[a.sample_id].nfe for a in alone],
        "alone_s": t1 - t0,
        "together_s": t2 - t1,
        **first,
    }


@torch.no_grad()
def first_step_logits(adapter, reqs) -> dict[str, Any]:
    """The first denoise of every request (its engine-initial canvas, no self-conditioning), in one batch vs
    alone: the largest raw-logit difference and the share of positions with the same argmax. Separates
    rounding differences of batch-shaped kernels from what they do to sampled tokens over many steps."""
    from samplers import streams

    dev, v, c = adapter.device, adapter.vocab_size, adapter.canvas_length
    seeds = torch.tensor([r.seed for r in reqs], device=dev)
    zero = torch.zeros_like(seeds)
    canvas = streams.tokens(seeds, zero, zero, c, v, streams.INIT)  # as BlockDiffusionDecoder._init_canvas
    state = adapter.prefill([r.prompt_ids for r in reqs])
    batch = adapter.denoise(state, canvas, adapter.canvas_masks(state, c))
    del state
    diff, same_argmax = 0.0, 0.0
    for i, r in enumerate(reqs):
        one = adapter.prefill([r.prompt_ids])
        alone = adapter.denoise(one, canvas[i : i + 1], adapter.canvas_masks(one, c))[0]
        diff = max(diff, float((alone - batch[i]).abs().max()))
        same_argmax += float((alone.argmax(-1) == batch[i].argmax(-1)).double().mean()) / len(reqs)
    return {"first_step_logits_max_abs_diff": diff, "first_step_same_argmax_share": same_argmax}


def projected_loop_s(cfg, b: int, forwards: list[dict], canvas: int, with_generate: bool) -> float:
    """Rough wall of `loop_overhead` at batch b from the measured denoise time (0 when not measured): every
    contender run makes canvases x steps denoise calls plus a prefill (~context / canvas denoise-equivalents) and
    the commits; 1 counted + `loop_repeats` timed runs of 2 or 3 contenders, and 30% for everything else."""
    row = next((r for r in forwards if r["batch"] == b), None)
    if row is None:
        return 0.0
    per_run = row["denoise_selfcond_ms"] / 1e3 * (cfg.canvases * cfg.steps + cfg.context / canvas + cfg.canvases - 1)
    return 1.3 * per_run * (1 + cfg.loop_repeats) * (3 if with_generate else 2)
