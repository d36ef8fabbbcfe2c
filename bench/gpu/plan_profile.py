"""The profile behind `bench.gpu.gpu_plan`: every step kind traced once on the twins (`bench.cpu.plan_twins`).

Each traced call runs the code the engine runs (denoise, the compiled whole step, the sampler, commits, an AR
token, `generate()`, Gemma 4) under `bench.gpu.op_trace.Tracer`; `build_profile` collects their records, which
`bench.gpu.op_costs` rescales to the real widths and contexts and `bench.gpu.cost_model` turns into predictions.
`inductor_check` bounds `bench.gpu.fusion`'s model of the compiled step by inductor's own count.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from typing import Any

import torch

from bench.cpu.plan_twins import HF_VOCAB, TWIN, build_twin, build_twins
from bench.gpu.op_trace import Tracer

NEVER_STOP = 1e-30
JOINT = ((2, 1), (2, 2), (1, 1))  # (rows, commit entries) of the traced joint steps (`bench.gpu.cost_model`'s fit)


def _prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, length), generator=g).tolist()


def trace_denoise(adapter, tracer: Tracer, b: int) -> dict[str, Any]:
    """One `adapter.denoise` with self-conditioning on every row (a steady-state step), bf16 logits buffers as
    the engine's fused path on a GPU (raw logits + the kernel's processed copy)."""
    v, c = adapter.vocab_size, adapter.canvas_length
    state = adapter.prefill(_prompts(b, TWIN["context"], v, seed=b))
    canvas = torch.randint(0, v, (b, c), generator=torch.Generator().manual_seed(b))
    masks = adapter.canvas_masks(state, c)
    raw = torch.empty(b, c, v, dtype=adapter.dtype)
    sc = torch.zeros(b, c, v, dtype=adapter.dtype)
    return tracer.run(lambda: adapter.denoise(state, canvas, masks, sc, [True] * b, out=raw), rows=b)


@functools.cache
def _compiled_twin(model):
    """The twin's adapter as `model.compile=step` runs it (the same weights): its states hold a bucket of rows and,
    as commits fold into the step, sliding rings of window - 1 + 2C."""
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import char_tokenizer

    return DiffusionGemmaAdapter.from_model(
        model, char_tokenizer(), name="gpu-plan-twin", eos_token_ids=[1], compile="step"
    )


def whole_step_call(adapter, b: int, k: int = 0):
    """`model.compile=step`'s graph function over b prefilled rows and its arguments (a steady-state step:
    self-conditioning on every row), with rows 0..k-1 committing a canvas in the same forward (`WholeStep.joint`;
    k a bucket). The cache holds exactly context + 2C slots per row, all of which the graph's full layers attend
    (rows padded to the longest; `bench.gpu.op_costs` rescales them to the span a real run attends)."""
    from harness.engine.step_graph import WholeStep
    from samplers.config import EntropyBoundConfig

    adapter = _compiled_twin(adapter.model)
    v, c = adapter.vocab_size, adapter.canvas_length
    state = adapter.open(b, c, positions=TWIN["context"] + 2 * c)
    state = adapter.prefill(_prompts(b, TWIN["context"], v, seed=50 + b), state)
    cfg = EntropyBoundConfig()
    step = WholeStep(adapter, cfg, compile=False)
    canvas = torch.randint(0, v, (b, c), generator=torch.Generator().manual_seed(b))
    history = torch.full((cfg.stability_steps, b, c), -1, dtype=torch.long)
    logits = torch.zeros(b, c, v, dtype=adapter.dtype)  # the engine's workspace under compile=step
    keys = torch.tensor([list(range(b)), [0] * b, [3] * b], dtype=torch.long)
    commit = None
    if k:
        commit = (torch.randint(3, v, (k, c), generator=torch.Generator().manual_seed(70 + k)), list(range(k)))
    args = step.graph_args(state, canvas, history, logits, [True] * b, keys, cfg.temperatures(keys[2]), commit)
    return step, args, step.joint if k else step.step


def trace_whole_step(adapter, tracer: Tracer, b: int, k: int = 0, experts: str | None = None) -> dict[str, Any]:
    """One whole compiled step's graph function (with k commit entries folded in), run eagerly, its fused kernels
    marked (`bench.gpu.fusion`); `rows` counts the forward's entries (b + k), each a canvas of tokens. `experts`: the
    MoE experts' implementation in the traced step (`models.kernels.fused_moe.CHOICES`; the prefill before it runs the
    model's own, so the kernels need not run here: the tracer records their shapes)."""
    import harness.engine.step_graph

    step, args, fn = whole_step_call(adapter, b, k)
    phases = (
        (step._cache, "block_masks_at", "masks"),
        (step._cache, "causal_masks_at", "masks"),
        (harness.engine.step_graph, "sampler_step", "post"),
    )
    with _experts(adapter.model, experts):
        return tracer.run(lambda: fn(*args), rows=b + k, fused=True, phases=phases)


@contextlib.contextmanager
def _experts(model, name: str | None):
    """`model`'s experts implementation set to `name` (None: unchanged) while the block runs."""
    before = model.config.get_text_config()._experts_implementation
    if name:
        model.set_experts_implementation(name)
    try:
        yield
    finally:
        model.set_experts_implementation(before)


def inductor_check(layers: int = 6, vocab: int = HF_VOCAB, b: int = 1) -> dict[str, Any]:
    """`bench.gpu.fusion`'s model of the compiled step against inductor's own schedule of the same graph, on a
    `layers`-layer twin at a small vocabulary (the CPU compile takes about a minute): kernels and bytes moved,
    both at the twin's shapes. Inductor's count is `torch._inductor.metrics` (its scheduler nodes' read and
    write buffer sizes after fusion). That counter charges a broadcast operand at its full iteration size, and its
    CPU schedule differs from its CUDA one in places, so this bounds the model; it does not calibrate it."""
    import logging

    import torch._inductor.config as inductor_config
    import torch._inductor.metrics as metrics
    from torch._inductor.compile_fx import inductor_metrics_log

    pattern = ["sliding_attention"] * (layers - 1) + ["full_attention"]  # the released pattern's first block
    adapter = build_twin(vocab=vocab, text={"num_hidden_layers": layers, "layer_types": pattern})
    text = adapter.config.text_config
    layer_types = ["sliding" if t == "sliding_attention" else "full" for t in text.layer_types]
    tracer = Tracer(adapter.model, layer_types, set(), text.top_k_experts)
    model = trace_whole_step(adapter, tracer, b)["stats"]["fused_at_twin"]
    step, args, _ = whole_step_call(adapter, b)
    level = inductor_metrics_log.level
    inductor_metrics_log.setLevel(logging.INFO)  # what makes inductor count its buffers
    metrics.reset()
    torch._dynamo.reset()
    try:
        with inductor_config.patch(force_disable_caches=True), torch.no_grad():
            torch.compile(step.step, fullgraph=True, dynamic=False)(*args)
    finally:
        inductor_metrics_log.setLevel(level)
    nodes = [n for n, _ in metrics.nodes_num_elem]
    kernels = sum(
        type(n).__name__ != "NopKernelSchedulerNode" and type(getattr(n, "node", None)).__name__ != "MultiOutput"
        for n in nodes
    )
    return {
        "layers": layers,
        "vocab": vocab,
        "rows": b,
        "model": model,
        "inductor": {"kernels": kernels, "bytes": metrics.num_bytes_accessed},
        "bytes_ratio": model["bytes"] / max(1, metrics.num_bytes_accessed),
    }


def trace_sampler(adapter, tracer: Tracer, b: int) -> dict[str, Any]:
    """`harness.engine.decode.sampler_step` with the default sampler around the fused kernel: the kernel itself is
    modelled (one read of the raw logits, one write of the processed ones), its glue ops are traced."""
    from harness.engine.decode import sampler_step
    from samplers.config import EntropyBoundConfig
    from samplers.draw import StepDraw

    v, c = adapter.vocab_size, adapter.canvas_length
    cfg = EntropyBoundConfig()
    draw = StepDraw(
        torch.zeros(b, c, dtype=torch.long),
        torch.zeros(b, c, dtype=torch.long),
        torch.zeros(b, c),
        torch.ones(b, c),
    )
    x = torch.empty(b, c, 1, dtype=adapter.dtype)  # never read by the glue (the kernel reads the logits)
    keys = torch.tensor([list(range(b)), [0] * b, [3] * b], dtype=torch.long)
    temperature = cfg.temperatures(keys[2])
    canvas = torch.zeros(b, c, dtype=torch.long)
    history = torch.full((cfg.stability_steps, b, c), -1, dtype=torch.long)
    return tracer.run(
        lambda: sampler_step(cfg, lambda *a: draw, x, temperature, adapter.softcap, keys, canvas, history, v),
        rows=b,
        mode="sampler",
    )


def trace_commit(adapter, tracer: Tracer, b: int, k: int | None) -> dict[str, Any]:
    """`adapter.commit` of k of b rows (None: all rows, the one-call path), then the masks the engine rebuilds."""
    v, c = adapter.vocab_size, adapter.canvas_length
    state = adapter.prefill(_prompts(b, TWIN["context"], v, seed=10 + b))
    n = b if k is None else k
    canvas = torch.randint(0, v, (n, c), generator=torch.Generator().manual_seed(n))
    rows = None if k is None else list(range(k))

    def fn():
        new = adapter.commit(state, canvas, rows)
        adapter.canvas_masks(new, c)

    return tracer.run(fn, rows=n, mode="commit")


def trace_ar_same(adapter, tracer: Tracer, b: int) -> dict[str, Any]:
    """One AR token of the same weights: `bench.gpu.gpu_step_costs.ar_token_forward` (causal encoder + LM head)."""
    from bench.gpu.gpu_step_costs import ar_token_forward

    v = adapter.vocab_size
    state = adapter.prefill(_prompts(b, TWIN["context"], v, seed=20 + b))
    token = torch.randint(3, v, (b, 1), generator=torch.Generator().manual_seed(b))
    return tracer.run(lambda: ar_token_forward(adapter, state, token), rows=b, pre="other")


def trace_generate(adapter, tracer: Tracer, b: int) -> dict[str, Any]:
    """transformers' `generate()` with 2 denoising steps: the second decoder call (self-conditioned) and the
    sampling after it, cut out by counting decoder calls."""
    model, v, c = adapter.model, adapter.vocab_size, adapter.canvas_length
    ids = torch.tensor(_prompts(b, TWIN["context"], v, seed=30 + b))

    def fn():
        model.generate(
            ids,
            max_new_tokens=c,
            max_denoising_steps=2,
            confidence_threshold=NEVER_STOP,
            pad_token_id=adapter.pad_id,
            eos_token_id=v,
        )

    return tracer.run(fn, rows=b, segment_module=model.model.decoder, segment=2)


def trace_gemma4(model, tracer: Tracer, b: int) -> dict[str, Any]:
    """Gemma 4 greedy `generate()`: the third forward (the cache holds the twin's 37 tokens), cut out by counting
    the model's calls."""
    v = model.config.vocab_size
    ids = torch.tensor(_prompts(b, TWIN["context"] - 1, v, seed=40 + b))

    def fn():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=v,
        )

    return tracer.run(fn, rows=b, segment_module=model, segment=3, pre="other")


def build_profile(verbose: bool = False, compute: bool = False, twins: dict | None = None) -> dict[str, Any]:
    """Trace every step kind once on the twins (1-2 minutes on 2 idle CPU cores, most of it the whole step at the
    real vocabulary). `compute`: run the matmul and attention kernels too (same records, slower; by default
    their outputs are zeros of the right shape). `twins`: from `build_twins()`, to reuse them."""
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    twins = twins or build_twins()
    adapter = twins["adapter"]
    text = adapter.config.text_config
    layer_types = ["sliding" if t == "sliding_attention" else "full" for t in text.layer_types]
    twin = {
        "hidden": TWIN["hidden"],
        "intermediate": TWIN["intermediate"],
        "moe": TWIN["moe"],
        "canvas": adapter.canvas_length,
        "context": TWIN["context"],
        "held_sliding": min(TWIN["context"], TWIN["sliding_window"] - 1),
        "vocab": adapter.vocab_size,
    }
    from bench.cpu.released_model import FULL_TEXT

    real = dict(FULL_TEXT, layer_types=layer_types, canvas_length=adapter.canvas_length)
    from bench.gpu.op_costs import Shapes

    shapes = Shapes(twin, real)
    tracer = Tracer(adapter.model, layer_types, shapes.ctx_dims(), text.top_k_experts, compute)
    traces: dict[str, dict[str, Any]] = {}

    def note(name):
        if verbose:
            print(f"  traced {name} ({time.perf_counter() - t0:.1f} s)", flush=True)

    # the denoise step at the real vocabulary: how it blocks the LM head / self-conditioning depends on it
    traces["denoise"] = {str(b): trace_denoise(adapter, tracer, b) for b in (1, 3)}
    traces["sampler"] = {str(b): trace_sampler(adapter, tracer, b) for b in (1, 3)}
    traces["whole_step"] = {str(b): trace_whole_step(adapter, tracer, b) for b in (1, 2)}  # buckets: powers of 2
    traces["joint_step"] = {f"{b},{k}": trace_whole_step(adapter, tracer, b, k) for b, k in JOINT}
    # the same graphs with `model.experts=triton` (models.kernels.fused_moe)
    traces["whole_step_tmoe"] = {str(b): trace_whole_step(adapter, tracer, b, experts="triton") for b in (1, 2)}
    traces["joint_step_tmoe"] = {f"{b},{k}": trace_whole_step(adapter, tracer, b, k, "triton") for b, k in JOINT}
    note("denoise")
    # the rest at a small vocabulary (rescaled): commits, AR steps and generate() do not block by it
    small = twins["small"]
    stracer = Tracer(small.model, layer_types, shapes.ctx_dims(), text.top_k_experts, compute)
    small_v = {"vocab": HF_VOCAB}
    traces["commit_full"] = {str(b): trace_commit(small, stracer, b, None) | small_v for b in (1, 3)}
    traces["commit_part"] = {
        f"{b},{k}": trace_commit(small, stracer, b, k) | small_v for b, k in ((3, 1), (3, 2), (2, 1))
    }
    traces["ar_same"] = {str(b): trace_ar_same(small, stracer, b) | small_v for b in (1, 3)}
    note("commits, AR")
    traces["generate"] = {str(b): trace_generate(small, stracer, b) | small_v for b in (1, 3)}
    note("generate")
    gemma = twins["gemma4"]
    gtracer = Tracer(gemma, layer_types, shapes.ctx_dims(), text.top_k_experts, compute)
    traces["gemma4"] = {str(b): trace_gemma4(gemma, gtracer, b) | small_v for b in (1, 3)}
    note("gemma4")
    # real parameter count of the text model (the twin's parameters at the real widths)
    wmap = shapes.width_map()
    seen, real_params = set(), 0
    for n, p in adapter.model.named_parameters():
        if "vision" in n or p.untyped_storage().data_ptr() in seen:
            continue
        seen.add(p.untyped_storage().data_ptr())
        real_params += math.prod([wmap.get(d, d) for d in p.shape])
    return {
        "version": 1,
        "twin": twin,
        "real": real,
        "embed_bytes": float(real["vocab_size"] * real["hidden_size"] * 2),
        "traces": traces,
        "meta": {
            "real_parameters": real_params,
            "experts_implementation": getattr(text, "_experts_implementation", None),
            "attn_implementation": adapter.config._attn_implementation,
            "dtype": str(adapter.dtype),
            "torch": torch.__version__,
            "threads": threads,
            "kernels_computed": compute,
            "seconds": time.perf_counter() - t0,
        },
    }


_PROFILE: dict[str, Any] | None = None


def profile() -> dict[str, Any]:
    """The profile of the code as it is now, built once per process."""
    global _PROFILE
    if _PROFILE is None:
        _PROFILE = build_profile()
    return _PROFILE
