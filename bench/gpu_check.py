"""One prepared GPU check on a full-size DiffusionGemma (26B-A4B shape, random bf16 weights, built on the GPU).

Measures, on one accelerator in about 8 minutes or less on an H100/H200 (docs/gpu_check.md says what each
figure contains):
1. memory plan: the estimated decode peak per batch size (`models.memory`) against the device's memory;
   batch sizes that cannot fit are dropped with a printed note instead of an OOM;
2. forward costs per batch size: the adapter's `denoise` (256-token canvas through the bidirectional decoder
   plus the 262k LM head, without and with self-conditioning) vs one AR token forward (a 1-token causal
   encoder forward appending to the same cache, plus the LM head over that token and the final soft cap),
   and the MoE experts touched per layer in each (per row and over the batch: `models.expert_counter`);
3. the sampler step at 256 x 262,144 on the device (B = 1, 4): the fused Triton kernel vs
   `torch_sampling(draw_fast)` vs transformers' ops (`bench.sampler_step`), time and argmax agreement;
4. B=1 vs B=8 token agreement: the same 8 requests decoded alone and together through the engine, default
   sampler (on a GPU, kernels pick tilings by batch shape, so this may be below 1; on the CPU it is 1);
5. loop overhead per batch size: the engine exactly as the harness runs it
   (`BlockDiffusionDecoder(adapter, sampler).stream(requests, batch_size=b)`, fused kernel on CUDA) vs the
   bare model calls it makes (the same prefill + denoise + commit calls) vs transformers' `generate()`.
Random weights route tokens almost uniformly, so "experts touched" is an upper bound, not the report's ~84.

`--tiny` runs the same code on the CPU with a tiny config in seconds (tests run it, so the script cannot
rot); there the sampler uses the torch path and the fused rows are skipped, unless TRITON_INTERPRET=1 is
set (then the kernel runs in Triton's interpreter, and `--draw fused` puts it in the engine too).
The JSON is rewritten after every phase, so a run cut short keeps what it measured.
Needs transformers >= 5.23 (DiffusionGemma); see docs/gpu_check.md to install it offline.

    python -m bench.gpu_check            # full size on cuda
    python -m bench.gpu_check --tiny     # seconds, on CPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.common import interleaved, machine_info, median, print_machine, table, write_json
from models.expert_counter import ExpertCounter
from models.tiny import TINY_VISION  # the vision tower is never run here: a tiny one saves ~0.5B

# google/diffusiongemma-26B-A4B-it text tower (Gemma 4 26B A4B): 30 layers (5 sliding : 1 full), 128 experts top-8,
# expert FFN 704 + shared dense FFN 2112, hidden 2816, 16 heads, KV heads 8 (sliding, head 256) / 2 (full, head 512).
FULL_TEXT = dict(
    vocab_size=262_144,
    hidden_size=2816,
    intermediate_size=2112,
    num_hidden_layers=30,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=256,
    global_head_dim=512,
    num_global_key_value_heads=2,
    num_experts=128,
    top_k_experts=8,
    moe_intermediate_size=704,
    sliding_window=1024,
    max_position_embeddings=262_144,
    final_logit_softcapping=30.0,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
# A mean entropy no real distribution goes below: the stop check runs every step but never fires, so every
# contender of the loop-overhead runs makes the same number of forwards.
NEVER_STOP = 1e-30
PHASES = ("forward", "sampler", "agreement", "loop", "compiled")


@dataclass
class CheckConfig:
    tiny: bool = False
    device: str = "cuda"
    dtype: str = "bfloat16"
    batches: list[int] = field(default_factory=lambda: [1, 8, 32])  # forward-cost and loop-overhead batch sizes
    context: int = 1024  # prompt tokens per row
    steps: int = 8  # fixed denoising steps per canvas in the loop-overhead runs
    canvases: int = 2  # canvases per request in the loop-overhead runs (a commit between them)
    repeats: int = 10  # forward-cost timings
    loop_repeats: int = 2  # loop-overhead timings (after one counted warm-up run of each contender)
    agree_requests: int = 8  # requests decoded alone and together
    agree_max_steps: int = 48  # the default sampler's cap (random weights never stop early)
    sampler_batches: list[int] = field(default_factory=lambda: [1, 4])
    sampler_repeats: int = 5
    draw: str | None = None  # None: the default sampler (draw="fast": the fused kernel on CUDA); "fused" forces it
    headroom: float = 0.9  # share of the device memory a batch may plan to use (as models.memory)
    memory_budget_gib: float | None = None  # plan against this instead of the device's memory (tests)
    # generate() holds ~8 U of float32 logits temporaries at its peak (U = B x C x V x 4 bytes; `bench.engine`
    # measures it: softcapped logits, scaled copy, softmax, and Categorical's normalised logits, probs, clamp, product)
    generate_logits_factor: float = 8.0
    deadline_s: float = 480.0  # skip loop batch sizes projected to end past this wall time (the JSON says so)
    phases: list[str] = field(default_factory=lambda: list(PHASES))
    plan: str = "outputs/bench/gpu_plan.json"  # `make gpu-plan`'s predictions, printed beside the measurements
    compiled_batches: list[int] = field(default_factory=lambda: [1, 8])  # `model.compile=step` vs eager, last

    @classmethod
    def tiny_cpu(cls) -> CheckConfig:
        return cls(
            tiny=True,
            device="cpu",
            dtype="float32",
            batches=[1, 2],
            context=8,
            steps=3,
            repeats=2,
            loop_repeats=1,
            agree_max_steps=4,
            sampler_batches=[1, 2],
            sampler_repeats=1,
            deadline_s=600.0,
            compiled_batches=[1],
        )


def model_config(tiny: bool):
    from transformers import DiffusionGemmaConfig

    if tiny:
        from models.tiny import diffusion_config

        return diffusion_config(112, canvas_length=16)
    return DiffusionGemmaConfig(
        text_config=FULL_TEXT,
        vision_config=TINY_VISION,
        canvas_length=256,
        boi_token_id=255_999,
        eoi_token_id=258_882,
        image_token_id=258_880,
    )


@contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(config, device: str, dtype: torch.dtype):
    """Random weights created and initialised directly on `device` (no CPU copy of 50 GB)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    with torch.device(device), default_dtype(dtype):
        model = DiffusionGemmaForBlockDiffusion(config)
    return model.eval()


def make_adapter(model, tokenizer, eos_ids: list[int]):
    """A DiffusionGemmaAdapter over the in-memory random model."""
    from models.diffusion_gemma import DiffusionGemmaAdapter

    return DiffusionGemmaAdapter.from_model(
        model, tokenizer, name="diffusiongemma-26B-A4B-shape-random", eos_token_ids=eos_ids
    )


def _cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def _mem(device: str) -> dict[str, float]:
    if not _cuda(device):
        return {}
    return {
        "allocated_gib": torch.cuda.memory_allocated() / 2**30,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def _reset_peak(device: str) -> None:
    if _cuda(device):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _timed(fns: dict, repeats: int, device: str, warmup: int = 1) -> dict[str, list[float]]:
    return interleaved(fns, repeats=repeats, warmup=warmup, device=device)


def _prompts(v: int, n: int, lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, v, (lengths[i],), generator=g).tolist() for i in range(n)]


# ---------------------------------------------------------------------------------------------- memory plan


def memory_plan(model, cfg: CheckConfig, parameters: int) -> dict[str, Any]:
    """Which batch sizes fit, from `models.memory`'s estimate of the engine's decode peak (and generate()'s,
    whose logits temperaries are larger), against the device's memory: free now plus what this process holds
    (the weights), or `memory_budget_gib`."""
    from models.memory import DTYPE_BYTES, GIB, estimate_decode_peak, free_memory_bytes, largest_batch_that_fits

    dtype_bytes = DTYPE_BYTES[cfg.dtype]
    c = model.config.canvas_length
    if cfg.memory_budget_gib is not None:
        total, source = int(cfg.memory_budget_gib * GIB), "memory_budget_gib"
    elif _cuda(cfg.device):
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


# ---------------------------------------------------------------------------------------------- forward costs


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
def forward_costs(adapter, b: int, cfg: CheckConfig, fused: bool) -> dict[str, Any]:
    """`adapter.denoise` (decoder + LM head; without / with self-conditioning) vs one AR token forward (with and
    without its LM head), on the same cache. The logits buffers are the engine's: model dtype on the fused path,
    float32 on the torch path."""
    dev, v, c = cfg.device, adapter.vocab_size, adapter.canvas_length
    _reset_peak(dev)
    state = adapter.prefill(_prompts(v, b, [cfg.context] * b, seed=b))
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
    mem_denoise = _mem(dev)
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


# ---------------------------------------------------------------------------------------------- vs the plan

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
PLAN_DENOISE_PARTS = ("attention", "moe", "mlp", "lm_head", "other")  # what `denoise_ms` runs
PLAN_COLUMNS = ["part", "batch", "context", "plan_context", "measured_ms", "predicted_ms", "measured_over_predicted"]


def plan_gpu(name: str | None) -> str | None:
    """The cost model's GPU (`bench.cost_model.GPUS` key) for a CUDA device name, None for any other device."""
    from bench.cost_model import GPUS

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


# ---------------------------------------------------------------------------------------------- engine runs


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


def engine_sampler(cfg: CheckConfig, **knobs):
    """The harness's default sampler (entropy bound, linear 0.8 -> 0.4, adaptive stop, self-conditioning,
    draw="fast": the fused kernel on CUDA), with `knobs` changed; `cfg.draw` overrides the draw."""
    from samplers.config import EntropyBoundConfig

    return EntropyBoundConfig(**knobs, **({"draw": cfg.draw} if cfg.draw else {}))


@torch.no_grad()
def loop_overhead(adapter, cfg: CheckConfig, b: int, with_generate: bool) -> dict[str, Any]:
    """Wall of `canvases` canvases at `steps` fixed steps each: the engine as the harness runs it vs the bare
    model calls it makes (the same prefill + denoise + commit calls, self-conditioning buffers included, no
    sampling) vs transformers' `generate()` at the same batch (its adaptive stop kept from firing)."""
    from contract.records import GenerationRequest
    from harness.decode import BlockDiffusionDecoder

    dev, v, c, s, k = cfg.device, adapter.vocab_size, adapter.canvas_length, cfg.steps, cfg.canvases
    prompts = _prompts(v, b, [cfg.context] * b, seed=7)
    reqs = [GenerationRequest(f"r{i}", prompts[i], seed=i, max_new_tokens=k * c) for i in range(b)]
    dec = BlockDiffusionDecoder(adapter, engine_sampler(cfg, max_steps=s, stop_entropy=NEVER_STOP))
    sc_dtype = adapter.dtype if dec.fused else torch.float32

    def engine():
        return list(dec.stream(reqs, batch_size=b))

    def bare():
        state = adapter.prefill(prompts)
        raw = torch.empty(b, c, v, dtype=sc_dtype, device=dev)
        sc = torch.zeros(b, c, v, dtype=adapter.dtype, device=dev) if dec.fused else raw
        canvas = torch.randint(0, v, (b, c), device=dev)
        every = [True] * b
        for kk in range(k):
            masks = adapter.canvas_masks(state, c)
            for step in range(s):
                adapter.denoise(state, canvas, masks, sc if step else None, every if step else None, out=raw)
            if kk < k - 1:
                state = adapter.commit(state, canvas)

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

    _reset_peak(dev)
    # one counted run of each contender (also the warm-up: Triton compile, cuBLAS/grouped-mm heuristics)
    engine_calls, bare_calls = Counter(), Counter()
    with counting_calls(adapter, engine_calls):
        results = engine()
    with counting_calls(adapter, bare_calls):
        bare()
    hf_forwards, generate_skipped = 0, None
    if with_generate:

        def count(*_):
            nonlocal hf_forwards
            hf_forwards += 1

        handle = adapter.model.model.decoder.register_forward_pre_hook(count)
        try:
            hf()
        except torch.OutOfMemoryError as e:  # generate() holds far more logits than the engine: keep the rest
            with_generate, generate_skipped = False, f"out of memory ({str(e).splitlines()[0][:160]})"
            _reset_peak(dev)
        finally:
            handle.remove()
    fns = {"bare": bare, "engine": engine, **({"generate": hf} if with_generate else {})}
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
    row.update(_mem(dev))
    row["rounds"] = times
    return row


@torch.no_grad()
def batch_agreement(adapter, cfg: CheckConfig, n: int) -> dict[str, Any]:
    """The same `n` requests (mixed prompt lengths) decoded one at a time and all together through the engine
    with the default sampler: share of samples with identical tokens, of identical positions, of equal NFE."""
    from contract.records import GenerationRequest
    from harness.decode import BlockDiffusionDecoder

    v, c = adapter.vocab_size, adapter.canvas_length
    gap = max(1, cfg.context // (2 * n))
    lengths = [max(1, cfg.context - i * gap) for i in range(n)]
    prompts = _prompts(v, n, lengths, seed=11)
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


def projected_loop_s(cfg: CheckConfig, b: int, forwards: list[dict], canvas: int, with_generate: bool) -> float:
    """Rough wall of `loop_overhead` at batch b from the measured denoise time (0 when not measured): every
    contender run makes canvases x steps denoise calls plus a prefill (~context / canvas denoise-equivalents) and
    the commits; 1 counted + `loop_repeats` timed runs of 2 or 3 contenders, and 30% for everything else."""
    row = next((r for r in forwards if r["batch"] == b), None)
    if row is None:
        return 0.0
    per_run = row["denoise_selfcond_ms"] / 1e3 * (cfg.canvases * cfg.steps + cfg.context / canvas + cfg.canvases - 1)
    return 1.3 * per_run * (1 + cfg.loop_repeats) * (3 if with_generate else 2)


# ---------------------------------------------------------------------------------------------- driver

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


def run(cfg: CheckConfig, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    try:
        from transformers import DiffusionGemmaForBlockDiffusion  # noqa: F401
    except ImportError as e:
        import transformers

        raise SystemExit(
            f"transformers {transformers.__version__} has no DiffusionGemma ({e}); see docs/gpu_check.md"
        ) from e
    from bench import sampler_step
    from harness.decode import BlockDiffusionDecoder
    from models.tiny import char_tokenizer

    if _cuda(cfg.device) and not torch.cuda.is_available():
        raise SystemExit("no CUDA device; use --tiny for the CPU smoke run")
    unknown = set(cfg.phases) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
    dtype = getattr(torch, cfg.dtype)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    info = machine_info()
    if not quiet:
        print_machine(info)
    t0 = time.perf_counter()
    _reset_peak(cfg.device)
    model = build_model(model_config(cfg.tiny), cfg.device, dtype)
    params = sum(p.numel() for p in model.parameters())
    build = {
        "build_s": time.perf_counter() - t0,
        "parameters": params,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        **_mem(cfg.device),
    }
    say("build: " + ", ".join(f"{k}={val}" for k, val in build.items()))
    # no EOS id the model can sample: every row runs to max_new_tokens, so every contender makes the same forwards
    adapter = make_adapter(model, char_tokenizer(), eos_ids=[model.config.text_config.vocab_size])
    v, c = adapter.vocab_size, adapter.canvas_length
    fused = BlockDiffusionDecoder(adapter, engine_sampler(cfg)).fused
    plan = memory_plan(model, cfg, params)
    say(
        table(
            plan["rows"],
            ["batch", "engine_estimate_gib", "engine_phase", "engine_fits", "generate_estimate_gib", "generate_fits"],
        )
    )
    say(
        f"memory: {plan['total_gib']:.1f} GiB ({plan['source']}), budget {plan['budget_gib']:.1f} GiB; "
        f"largest batch that fits: {plan['largest_batch_that_fits']}"
    )
    for note in plan["notes"]:
        say("note: " + note)
    payload: dict[str, Any] = {
        "bench": "gpu_check",
        "tiny": cfg.tiny,
        "complete": False,
        "config": asdict(cfg),
        "machine": info,
        "build": build,
        "engine_sampling": "fused kernel" if fused else "torch draw_fast",
        "contains": {
            "denoise_ms": "adapter.denoise: canvas embeddings + 30 bidirectional decoder layers over the canvas and "
            "the cached context + final norm + LM head (V logits per canvas position) written into the "
            "engine's logits buffer (logits_dtype); the soft cap is in the sampler step",
            "denoise_selfcond_ms": "the same plus self-conditioning (softmax over V x embedding matrix + its FFW "
            "block)",
            "ar_token_ms": "1-token causal encoder forward appending to the same cache + LM head over that token + "
            "float32 + final soft cap (an AR decode step)",
            "ar_token_no_head_ms": "the same without the LM head (the figure before; overstates denoise/AR)",
            "engine_s": "BlockDiffusionDecoder(adapter, sampler).stream(requests, batch_size=b) to the last result",
            "bare_s": "the engine's prefill + denoise + commit calls (same counts, same logits buffers), no sampling",
            "generate_s": "model.generate() at the same batch, steps and canvases",
            "compiled": "bench.step_graph.compare: one denoising step (self-conditioning, decoder, LM head, sampler) "
            "eager (denoise + sampler_step) vs model.compile=step's graph (CUDA graphs on CUDA), host ops and ms",
        },
        "memory": plan,
        "forward": [],
        "loop": [],
        "compiled": [],
        "agreement": None,
        "sampler": [],
        "phase_s": {},
        "skipped": [],
    }
    name = "gpu_check_tiny" if cfg.tiny else "gpu_check"
    dest = {"out_dir": out_dir} if out_dir else {}
    path = write_json(name, payload, **dest)

    def phase(key: str, fn) -> None:
        if key not in cfg.phases:
            return
        t = time.perf_counter()
        try:
            fn()
        finally:
            payload["phase_s"][key] = payload["phase_s"].get(key, 0.0) + time.perf_counter() - t
            payload["total_s"] = time.perf_counter() - t0
            write_json(name, payload, **dest)

    def guarded(what: str, fn):
        """Run fn; an OOM is recorded (and the run goes on) instead of ending the check."""
        try:
            return fn()
        except torch.OutOfMemoryError as e:
            payload["skipped"].append(f"{what}: out of memory ({str(e).splitlines()[0][:160]})")
            say(f"note: {payload['skipped'][-1]}")
            _reset_peak(cfg.device)
            return None

    def forwards():
        for b in plan["batches"]:
            row = guarded(f"forward batch {b}", lambda b=b: forward_costs(adapter, b, cfg, fused))
            if row:
                payload["forward"].append(row)
        say(table(payload["forward"], FORWARD_COLUMNS))

    def sampler():
        for b in cfg.sampler_batches:
            row = guarded(
                f"sampler batch {b}",
                lambda b=b: sampler_step.bench_one(b, c, v, cfg.sampler_repeats, warmup=1, device=cfg.device),
            )
            if row:
                payload["sampler"].append(row)
        say(table(payload["sampler"], SAMPLER_COLUMNS))

    def agreement():
        if plan["agree_requests"] >= 2:
            payload["agreement"] = guarded("agreement", lambda: batch_agreement(adapter, cfg, plan["agree_requests"]))
        if payload["agreement"]:
            say(table([payload["agreement"]], AGREE_COLUMNS))

    def loops():
        for b in plan["batches"]:
            projected = projected_loop_s(cfg, b, payload["forward"], c, b in plan["generate_batches"])
            if time.perf_counter() - t0 + projected > cfg.deadline_s:
                payload["skipped"].append(
                    f"loop batch {b}: would end past the {cfg.deadline_s:.0f}s deadline "
                    f"(projected {projected:.0f}s from the forward timings)"
                )
                say(f"note: {payload['skipped'][-1]}")
                continue
            row = guarded(f"loop batch {b}", lambda b=b: loop_overhead(adapter, cfg, b, b in plan["generate_batches"]))
            if row:
                payload["loop"].append(row)
        say(table(payload["loop"], LOOP_COLUMNS))

    phase("forward", forwards)
    phase("sampler", sampler)
    phase("agreement", agreement)

    def compiled():
        """`model.compile=step`'s step (one graph per bucket; CUDA graphs on CUDA) vs the eager step: host ops, step
        time, compile time, graphs and breaks, logits difference and tokens. Last: compiling the 26B step takes
        minutes, so a batch is skipped once the deadline has passed."""
        from bench import step_graph

        mode = "reduce-overhead" if _cuda(cfg.device) else None
        for b in cfg.compiled_batches:
            if time.perf_counter() - t0 > cfg.deadline_s:
                payload["skipped"].append(f"compiled batch {b}: past the {cfg.deadline_s:.0f}s deadline")
                say(f"note: {payload['skipped'][-1]}")
                continue
            row = guarded(f"compiled batch {b}", lambda b=b: step_graph.compare(adapter, b, cfg.repeats, mode))
            if row:
                payload["compiled"].append({**row, "mode": mode})
        say(table(payload["compiled"], COMPILED_COLUMNS))
        b = max(cfg.compiled_batches, default=0)
        if b and time.perf_counter() - t0 <= cfg.deadline_s:  # a step with a third of its rows committing
            fold = guarded(
                f"compiled fold batch {b}",
                lambda: step_graph.compare_fold(adapter, b, max(1, b // 3), cfg.repeats, mode),
            )
            if fold:
                payload["compiled_fold"] = [{**fold, "mode": mode}]
                say(table(payload["compiled_fold"], list(fold)))

    phase("loop", loops)
    phase("compiled", compiled)
    payload["versus_plan"] = versus_plan(payload, cfg.plan)
    if payload["versus_plan"]:
        say(f"measured vs predicted ({cfg.plan}; roofline, GPU time only):")
        say(table(payload["versus_plan"], PLAN_COLUMNS))
    elif plan_gpu(info.get("gpu")):
        say(f"note: no cost-model plan at {cfg.plan} to compare with: run `make gpu-plan` first (any machine)")
    payload["complete"] = True
    payload["total_s"] = time.perf_counter() - t0
    if _cuda(cfg.device):
        payload["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    path = write_json(name, payload, **dest)
    say(f"total {payload['total_s']:.1f}s; wrote {path}")
    return payload


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny config on CPU (smoke test)")
    p.add_argument("--device", default=None)
    p.add_argument("--batches", type=int, nargs="+", default=None)
    p.add_argument("--context", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="fixed steps per canvas in the loop-overhead runs")
    p.add_argument("--canvases", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--loop-repeats", type=int, default=None)
    p.add_argument("--agree-max-steps", type=int, default=None)
    p.add_argument(
        "--draw", choices=["fast", "fused", "exact"], default=None, help="engine draw (default: the sampler's)"
    )
    p.add_argument("--memory-budget-gib", type=float, default=None, help="plan batch sizes against this memory")
    p.add_argument("--deadline-s", type=float, default=None)
    p.add_argument("--phases", nargs="+", choices=PHASES, default=None)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: 1 with --tiny, torch's otherwise)")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--plan", default=None, help="`make gpu-plan`'s JSON to compare with (default outputs/bench/)")
    a = p.parse_args(argv)
    cfg = CheckConfig.tiny_cpu() if a.tiny else CheckConfig()
    threads = a.threads or (1 if a.tiny else None)
    if threads:  # tiny models on a shared CPU: multi-threaded small ops wait on busy cores
        torch.set_num_threads(threads)
    for key in (
        "device",
        "batches",
        "context",
        "steps",
        "canvases",
        "repeats",
        "loop_repeats",
        "agree_max_steps",
        "draw",
        "memory_budget_gib",
        "deadline_s",
        "phases",
        "plan",
    ):
        if getattr(a, key) is not None:
            setattr(cfg, key, getattr(a, key))
    run(cfg, a.out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
