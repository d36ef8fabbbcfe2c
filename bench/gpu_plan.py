"""GPU cost model of a DiffusionGemma 26B-A4B decode step: `python -m bench.gpu_plan` (`make gpu-plan`).

Predicts, per denoising step and per part (attention, MoE experts, shared dense MLP, LM head,
self-conditioning, sampler, cache maintenance, re-encoding of committed canvases, other, host dispatch),
the FLOPs, bytes and time on an H100 / H200 / A100 at B = 1, 8, 32, 64 and 1k / 8k / 32k contexts, for:

- `current`  the engine as the code runs by default (`models.diffusion_gemma.DiffusionGemmaAdapter.denoise`,
             `commit`, `harness.decode`'s sampler step with the fused kernel): eager, every op dispatched;
- `compiled` the engine with `model.compile=step` (`harness.step_graph`): the step's graph as traced, commits
             folded into it, fused by inductor's rules (`bench.fusion`), replayed as one CUDA graph;
- `planned`  weights read once per step, one CUDA-graph launch, only new K/V written, attention reading
             each row's real context at its real K/V heads, commits folded into the step's forward;
- `per_row`  what-if: the LM head and self-conditioning per row and per 64 MiB block (the engine before
             `models.logits_blocks`: 2 x B x 4 embedding reads per step);
- `fused`    what-if: `planned` with the elementwise ops fused into the matmul / attention kernels;
- `generate` transformers' `generate()` (its own traced step and sampling);
- `floor`    the roofline floor: weights and K/V read once, FLOPs at the achievable peak, one launch;

plus an AR token step of the same weights, Gemma 4 AR through `generate()` and AR+MTP, with tokens/s at
the report's tokens per forward next to its batch-1 figures (H100 FP8; ours are bf16).

The op shapes and counts come from the code that runs: one real forward of a narrow twin of the config
(the released layer pattern, 128 experts top-8, head counts, head dims, canvas and 262,144-token vocabulary;
hidden 72, FFNs 88 / 40, sliding window 24, 37 cached tokens) through the real adapter, under
`torch.utils.flop_counter.FlopCounterMode` and a `TorchDispatchMode` that records every aten op, the module
it ran in and its tensor shapes (`bench.op_costs` rescales them to the real widths and contexts). So if
`denoise` changes how it runs the LM head, the prediction changes with it. The numbers are arithmetic
(roofline), not measurements: `bench.gpu_check` measures the same parts on a GPU.

    python -m bench.gpu_plan                                  # H100 and H200, all batches and contexts
    python -m bench.gpu_plan --gpu h200 --batch 1 32 --context 8k
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from typing import Any

import torch

from bench.common import OUT_DIR, write_json
from bench.cost_model import AR, DIFFUSION, Knobs, Model
from bench.gpu_specs import GPU, GPUS, REPORT, gpu_spec
from bench.op_costs import PARTS
from bench.op_trace import Tracer

# The twin: every dimension that sets op counts or per-op shapes at real scale is the released one (layers and
# their 5:1 pattern, experts and top-k, heads, K/V heads, head dims, vocabulary, canvas); the widths that only
# scale matmuls are small and distinct from every other dimension (so a traced dimension names its width).
TWIN = dict(hidden=72, intermediate=88, moe=40, sliding_window=24, context=37)
# transformers' own loops (generate()) have no vocabulary-dependent blocking: their twins use a small
# vocabulary (rescaled like a width), which keeps the CPU's softmax / sampling over the logits short
HF_VOCAB = 3000
BATCHES = (1, 8, 32, 64)
CONTEXTS = (1024, 8192, 32768)
NEVER_STOP = 1e-30


# ---------------------------------------------------------------------------------------------- twin models


def twin_text(vocab: int | None = None) -> dict[str, Any]:
    from bench.gpu_check import FULL_TEXT

    return dict(
        FULL_TEXT,
        vocab_size=vocab or FULL_TEXT["vocab_size"],
        hidden_size=TWIN["hidden"],
        intermediate_size=TWIN["intermediate"],
        moe_intermediate_size=TWIN["moe"],
        sliding_window=TWIN["sliding_window"],
    )


def build_twin(dtype: torch.dtype = torch.bfloat16, vocab: int | None = None, text: dict | None = None):
    """The DiffusionGemma twin (random weights, CPU, bf16 like the GPU run) and its adapter (`text`: overrides of
    the twin's text config)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from bench.gpu_check import default_dtype
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import TINY_VISION, char_tokenizer

    text = {**twin_text(vocab), **(text or {})}
    v = text["vocab_size"]
    cfg = DiffusionGemmaConfig(
        text_config=text,
        vision_config=TINY_VISION,
        canvas_length=256,
        boi_token_id=255_999 if vocab is None else v - 3,
        eoi_token_id=258_882 if vocab is None else v - 2,
        image_token_id=258_880 if vocab is None else v - 1,
    )
    torch.manual_seed(0)
    with torch.device("cpu"), default_dtype(dtype):
        model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    return DiffusionGemmaAdapter.from_model(model, char_tokenizer(), name="gpu-plan-twin", eos_token_ids=[1])


def build_gemma4_twin(dtype: torch.dtype = torch.bfloat16, vocab: int | None = HF_VOCAB):
    """Gemma 4 26B-A4B's causal LM at the same twin widths (the AR baseline's model class)."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    from bench.gpu_check import default_dtype

    text = twin_text(vocab)
    cfg = Gemma4TextConfig(
        **text,
        enable_moe_block=True,
        attention_k_eq_v=True,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=text["vocab_size"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cpu"), default_dtype(dtype):
        return Gemma4ForCausalLM(cfg).eval()


# ---------------------------------------------------------------------------------------------- the profile


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
    (rows padded to the longest; `bench.op_costs` rescales them to the span a real run attends)."""
    from harness.step_graph import WholeStep
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


def trace_whole_step(adapter, tracer: Tracer, b: int, k: int = 0) -> dict[str, Any]:
    """One whole compiled step's graph function (with k commit entries folded in), run eagerly, its fused kernels
    marked (`bench.fusion`); `rows` counts the forward's entries (b + k), each a canvas of tokens."""
    import harness.step_graph

    step, args, fn = whole_step_call(adapter, b, k)
    phases = (
        (step._cache, "block_masks_at", "masks"),
        (step._cache, "causal_masks_at", "masks"),
        (harness.step_graph, "sampler_step", "post"),
    )
    return tracer.run(lambda: fn(*args), rows=b + k, fused=True, phases=phases)


def inductor_check(layers: int = 6, vocab: int = HF_VOCAB, b: int = 1) -> dict[str, Any]:
    """`bench.fusion`'s model of the compiled step against inductor's own schedule of the same graph, on a
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
    """`harness.decode.sampler_step` with the default sampler around the fused kernel: the kernel itself is
    modelled (one read of the raw logits, one write of the processed ones), its glue ops are traced."""
    from harness.decode import sampler_step
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
    """One AR token of the same weights: `bench.gpu_step_costs.ar_token_forward` (causal encoder + LM head)."""
    from bench.gpu_step_costs import ar_token_forward

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


def build_twins() -> dict[str, Any]:
    """The three twins: DiffusionGemma at the real vocabulary (its denoise blocks by it), the same at a small
    vocabulary (commits, AR steps, generate()), and Gemma 4's causal LM (small vocabulary)."""
    return {"adapter": build_twin(), "small": build_twin(vocab=HF_VOCAB), "gemma4": build_gemma4_twin()}


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
    from bench.gpu_check import FULL_TEXT

    real = dict(FULL_TEXT, layer_types=layer_types, canvas_length=adapter.canvas_length)
    from bench.op_costs import Shapes

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
    traces["joint_step"] = {f"{b},{k}": trace_whole_step(adapter, tracer, b, k) for b, k in ((2, 1), (2, 2), (1, 1))}
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


def predict(
    gpu: str | GPU, batch: int, context: int, variant: str, profile_: dict | None = None, **knobs
) -> dict[str, Any]:
    """Predicted step of `variant` (current / planned / generate / floor / ar_same / ar_gemma4 / ar_mtp /
    ar_floor) at `batch` rows and `context` cached tokens per row on `gpu` ("h100", "h200", "a100" or a
    `bench.gpu_specs.GPU`): {"parts": {part: {"flops", "bytes", "ms", ...}}, "dispatch_ms", "total_ms",
    "tokens_per_s", ...}. For `bench.gpu_check` to print measured vs predicted per part."""
    gpu_knobs = {k: knobs.pop(k) for k in list(knobs) if k in GPU.__dataclass_fields__}
    model = Model(profile_ or profile(), Knobs(**knobs))
    return model.predict(gpu_spec(gpu, **gpu_knobs), batch, context, variant)


# ---------------------------------------------------------------------------------------------- report

PART_COLS = {
    "attention": "attn",
    "moe": "moe",
    "mlp": "mlp",
    "lm_head": "head",
    "selfcond": "selfc",
    "sampler": "sampl",
    "cache": "cache",
    "encode": "encode",
    "other": "other",
}


def _ctx_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _parse_context(s: str) -> int:
    s = s.strip().lower()
    return int(float(s[:-1]) * 1024) if s.endswith("k") else int(s)


def evaluate(model: Model, gpus: list[GPU], batches, contexts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g in gpus:
        rows = []
        for b in batches:
            for ctx in contexts:
                preds = {v: model.predict(g, b, ctx, v) for v in DIFFUSION + AR}
                floor = preds["floor"]["total_ms"]
                for v in DIFFUSION:
                    preds[v]["x_floor"] = preds[v]["total_ms"] / floor
                ar_floor = preds["ar_floor"]["total_ms"]
                for v in AR:
                    preds[v]["x_floor"] = preds[v]["total_ms"] / ar_floor
                rows.append({"batch": b, "context": ctx, "variants": preds})
        out[g.key] = {"gpu": g.describe(), "rows": rows}
    return out


def _fmt(x: float) -> str:
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def print_report(results: dict[str, Any], prof: dict[str, Any], knobs: Knobs) -> None:
    d1 = prof["traces"]["denoise"]["1"]["stats"]
    d3 = prof["traces"]["denoise"]["3"]["stats"]
    print(
        "GPU plan: roofline arithmetic from traced op shapes, NOT measurements "
        "(bf16; the report's speeds are H100 FP8)."
    )

    def rows(st):
        return ", ".join(f"{part} {n}" for part, n in st["embed_matmul_rows"])

    meta = prof["meta"]
    print(
        f"traced on the CPU twin ({meta['seconds']:.0f} s): one denoise = {d1['aten_ops']} aten ops at B=1 "
        f"({d1['kernels']} kernels), {d3['aten_ops']} at B=3; embedding-weight matmuls (rows each): B=1 "
        f"[{rows(d1)}], B=3 [{rows(d3)}]; real model {meta['real_parameters'] / 1e9:.2f} B parameters; "
        f"experts {meta['experts_implementation']}, attention {meta['attn_implementation']}."
    )
    routing = (
        "uniform routing"
        if knobs.experts_per_canvas is None
        else f"{knobs.experts_per_canvas:g} experts per canvas (calibrated)"
    )
    print(f"TPF {knobs.tpf} (steps per canvas {256 / knobs.tpf:.1f}), {routing}.")
    cols = list(PART_COLS.values())
    for res in results.values():
        g = res["gpu"]
        print(
            f"\n== {g['name']}: {g['peak_flops'] / 1e12:.0f} TFLOP/s x {g['flops_frac']:.0%}, "
            f"{g['hbm_bw'] / 1e12:.2f} TB/s x {g['bw_frac']:.0%}; eager {g['eager_launch_us']:g} us/kernel "
            f"+ {g['view_us']:g} us/view op, CUDA graph {g['graph_launch_us']:g} us/step"
        )
        print("per denoising step, ms (parts: roofline per part; disp = host dispatch; x fl = total / floor)")
        head = f"{'B':>3} {'ctx':>4} {'variant':<9}" + "".join(f"{c:>7}" for c in cols)
        head += f"{'disp':>7}{'total':>8}{'x fl':>6}{'tok/s':>8}"
        print(head)
        for row in res["rows"]:
            for v in DIFFUSION:
                p = row["variants"][v]
                cells = "".join(
                    f"{_fmt(p['parts'][part]['ms']) if part in p['parts'] else '-':>7}" for part in PART_COLS
                )
                print(
                    f"{row['batch']:>3} {_ctx_label(row['context']):>4} {v:<9}{cells}{_fmt(p['dispatch_ms']):>7}"
                    f"{_fmt(p['total_ms']):>8}{p['x_floor']:>6.2f}{p['tokens_per_s']:>8.0f}"
                )
        print(f"\nAR steps, ms per token step and tok/s (AR TPF {knobs.ar_tpf}, AR+MTP TPF {knobs.mtp_tpf})")
        print(f"{'B':>3} {'ctx':>4}" + "".join(f"{v:>20}" for v in AR))
        for row in res["rows"]:
            cells = ""
            for v in AR:
                pv = row["variants"][v]
                cells += f"{_fmt(pv['total_ms']) + ' / ' + format(pv['tokens_per_s'], '.0f'):>20}"
            print(f"{row['batch']:>3} {_ctx_label(row['context']):>4}{cells}")
        b1 = [r for r in res["rows"] if r["batch"] == 1]
        if b1:
            print("batch 1 vs the report (H100 FP8: DiffusionGemma 1,479, AR 204, AR+MTP 303 tok/s; ours bf16):")
            for r in b1:
                v = r["variants"]
                print(
                    f"  ctx {_ctx_label(r['context']):>4}: diffusion eager {v['current']['tokens_per_s']:.0f} / "
                    f"compiled {v['compiled']['tokens_per_s']:.0f} / floor {v['floor']['tokens_per_s']:.0f} "
                    f"(report {REPORT['diffusion']['tok_s']:.0f}); AR same weights {v['ar_same']['tokens_per_s']:.0f}, "
                    f"Gemma 4 AR {v['ar_gemma4']['tokens_per_s']:.0f} / floor {v['ar_floor']['tokens_per_s']:.0f} "
                    f"(report {REPORT['ar']['tok_s']:.0f}); AR+MTP {v['ar_mtp']['tokens_per_s']:.0f} "
                    f"(report {REPORT['ar_mtp']['tok_s']:.0f})"
                )
        goal = [r for r in res["rows"] if r["context"] == 8192 and r["batch"] in (1, 32)]
        for r in goal:
            v = r["variants"]
            x, c = v["compiled"]["x_floor"], v["compiled"]
            print(
                f"goal (our step within 15% of the floor) at B={r['batch']}, 8k: compiled {x:.2f}x -> "
                f"{'meets' if x <= 1.15 else 'misses'} (eager {v['current']['x_floor']:.2f}x; its parts at their "
                f"own rooflines, one kernel after another: {v['floor']['serial_ms'] / v['floor']['total_ms']:.2f}x; "
                f"commits folded into {c['commit_events_per_step']:.2f} of its steps, "
                f"{c['commit_bucket_rows']:.1f} entries each)"
            )
    print("\nRoofline numbers are arithmetic, not measurements; `make gpu-check` measures on a GPU.")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", nargs="+", default=["h100", "h200"], help=f"{sorted(GPUS)} or all")
    p.add_argument("--batch", type=int, nargs="+", default=list(BATCHES))
    p.add_argument("--context", nargs="+", default=[str(c) for c in CONTEXTS], help="tokens per row (8k = 8192)")
    p.add_argument("--json", default=str(OUT_DIR / "gpu_plan.json"), help="output JSON path")
    p.add_argument("--tpf", type=float, default=REPORT["diffusion"]["tpf"])
    p.add_argument("--experts-per-canvas", type=float, default=None, help="calibrate routing (report: ~84)")
    p.add_argument("--spread", type=float, default=0.0, help="rows' contexts uniform in [ctx (1-spread), ctx]")
    p.add_argument(
        "--capacity", type=_parse_context, default=None, help="slots reserved per row (32k; attended by neither engine)"
    )
    p.add_argument("--launch-us", type=float, default=None, help="eager host cost per kernel (default 5)")
    p.add_argument("--graph-node-us", type=float, default=None, help="device gap per kernel in a graph (default 0)")
    p.add_argument("--compute", action="store_true", help="trace with the matmul/attention arithmetic done too")
    a = p.parse_args(argv)
    names = sorted(GPUS) if a.gpu == ["all"] else a.gpu
    gpus = [gpu_spec(n, eager_launch_us=a.launch_us, graph_node_us=a.graph_node_us) for n in names]
    contexts = [_parse_context(c) for c in a.context]
    torch.set_num_threads(max(1, torch.get_num_threads()))
    prof = build_profile(compute=True) if a.compute else profile()
    knobs = Knobs(tpf=a.tpf, experts_per_canvas=a.experts_per_canvas, spread=a.spread, capacity=a.capacity)
    model = Model(prof, knobs)
    results = evaluate(model, gpus, a.batch, contexts)
    print_report(results, prof, knobs)
    payload = {
        "note": "roofline arithmetic from traced op shapes of the code as it runs; not measurements",
        "knobs": vars(knobs),
        "profile": {
            "meta": prof["meta"],
            "twin": prof["twin"],
            "stats": {t: {k: v["stats"] for k, v in d.items()} for t, d in prof["traces"].items()},
        },
        "parts": list(PARTS),
        "results": results,
    }
    from pathlib import Path

    out = Path(a.json)
    path = write_json(out.stem, payload, out.parent)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
