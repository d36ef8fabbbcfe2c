"""One prepared GPU check on a full-size DiffusionGemma (26B-A4B shape, random bf16 weights, built on the GPU).

Measures, on one accelerator in about 8 minutes or less on an H100/H200 (docs/gpu_check.md says what each
figure contains):
1. memory plan: the estimated decode peak per batch size (`models.planning.memory`) against the device's memory;
   batch sizes that cannot fit are dropped with a printed note instead of an OOM;
2. forward costs per batch size: the adapter's `denoise` (256-token canvas through the bidirectional decoder
   plus the 262k LM head, without and with self-conditioning) vs one AR token forward (a 1-token causal
   encoder forward appending to the same cache, plus the LM head over that token and the final soft cap),
   and the MoE experts touched per layer in each (per row and over the batch: `models.instruments.expert_counter`);
3. the sampler step at 256 x 262,144 on the device (B = 1, 4): the fused Triton kernel vs
   `torch_sampling(draw_fast)` vs transformers' ops (`bench.cpu.sampler_step_bench`), time and argmax agreement;
   then one layer's MoE experts, transformers' grouped_mm vs `model.experts=triton` (`bench.gpu.moe_experts`);
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

    python -m bench.gpu.gpu_check            # full size on cuda
    python -m bench.gpu.gpu_check --tiny     # seconds, on CPU
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from bench.cpu.common import machine_info, print_machine, table, write_json
from bench.cpu.released_model import build_model, make_adapter, model_config
from bench.gpu.gpu_device import is_cuda, memory_gib, reset_peak_memory
from bench.gpu.gpu_engine_runs import (
    AGREE_COLUMNS,
    LOOP_COLUMNS,
    batch_agreement,
    engine_sampler,
    loop_overhead,
    projected_loop_s,
)
from bench.gpu.gpu_estimates import PLAN_COLUMNS, memory_plan, plan_gpu, versus_plan
from bench.gpu.gpu_step_costs import COMPILED_COLUMNS, FORWARD_COLUMNS, SAMPLER_COLUMNS, forward_costs

PHASES = ("forward", "sampler", "experts", "agreement", "loop", "compiled")


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
    headroom: float = 0.9  # share of the device memory a batch may plan to use (as models.planning.memory)
    memory_budget_gib: float | None = None  # plan against this instead of the device's memory (tests)
    # generate() holds ~8 U of float32 logits temporaries at its peak (U = B x C x V x 4 bytes; `bench.cpu.engine`
    # measures it: softcapped logits, scaled copy, softmax, and Categorical's normalised logits, probs, clamp, product)
    generate_logits_factor: float = 8.0
    deadline_s: float = 480.0  # skip loop batch sizes projected to end past this wall time (the JSON says so)
    phases: list[str] = field(default_factory=lambda: list(PHASES))
    plan: str = "outputs/bench/gpu_plan.json"  # `make gpu-plan`'s predictions, printed beside the measurements
    compiled_batches: list[int] = field(default_factory=lambda: [1, 8])  # `model.compile=step` vs eager, last
    compile_backend: str = "inductor"  # the engine's; "aot_eager": the same graphs without code generation

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
            # the phase's wiring (one graph, no breaks, same tokens, fewer host ops) without inductor's C++
            # compiles, minutes on 2 cores; tests/test_step_graph.py checks inductor's graphs
            compile_backend="aot_eager",
        )


def run(cfg: CheckConfig, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    try:
        from transformers import DiffusionGemmaForBlockDiffusion  # noqa: F401
    except ImportError as e:
        import transformers

        raise SystemExit(
            f"transformers {transformers.__version__} has no DiffusionGemma ({e}); see docs/gpu_check.md"
        ) from e
    from bench.cpu import sampler_step_bench as sampler_step
    from bench.gpu import moe_experts
    from harness.engine.decode import BlockDiffusionDecoder
    from models.kernels import fused_moe
    from models.tiny import char_tokenizer

    if is_cuda(cfg.device) and not torch.cuda.is_available():
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
    reset_peak_memory(cfg.device)
    model = build_model(model_config(cfg.tiny), cfg.device, dtype)
    params = sum(p.numel() for p in model.parameters())
    build = {
        "build_s": time.perf_counter() - t0,
        "parameters": params,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        **memory_gib(cfg.device),
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
            "compiled": "bench.cpu.step_graph_bench.compare: one denoising step "
            "(self-conditioning, decoder, LM head, sampler) eager (denoise + sampler_step) vs model.compile=step's "
            "graph (CUDA graphs on CUDA), host ops and ms",
        },
        "memory": plan,
        "forward": [],
        "loop": [],
        "compiled": [],
        "compiled_fold": [],
        "agreement": None,
        "sampler": [],
        "experts": [],
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

    def note(text: str) -> None:
        payload["skipped"].append(text)
        say(f"note: {text}")

    def guarded(what: str, fn):
        """Run fn; an OOM is recorded (and the run goes on) instead of ending the check. So is any other error on
        a GPU, where the code runs for the first time and a rerun costs minutes of a lent machine; on the CPU
        (`--tiny`, the tests) it is raised."""
        try:
            return fn()
        except torch.OutOfMemoryError as e:
            note(f"{what}: out of memory ({str(e).splitlines()[0][:160]})")
            reset_peak_memory(cfg.device)
        except Exception as e:
            if not is_cuda(cfg.device):
                raise
            note(f"{what}: failed: {type(e).__name__}: {str(e)[:300]}")
            reset_peak_memory(cfg.device)
        return None

    def record(key: str, row) -> None:
        """Keep a measured row, on disk at once: a run killed at its time limit keeps every finished row."""
        if row:
            payload[key].append(row)
            write_json(name, payload, **dest)

    def forwards():
        for b in plan["batches"]:
            record("forward", guarded(f"forward batch {b}", lambda b=b: forward_costs(adapter, b, cfg, fused)))
        say(table(payload["forward"], FORWARD_COLUMNS))

    def sampler():
        for b in cfg.sampler_batches:
            row = guarded(
                f"sampler batch {b}",
                lambda b=b: sampler_step.bench_one(b, c, v, cfg.sampler_repeats, warmup=1, device=cfg.device),
            )
            record("sampler", row)
        say(table(payload["sampler"], SAMPLER_COLUMNS))

    def experts():
        if not fused_moe.available(cfg.device):
            note("experts: model.experts=triton needs CUDA (or TRITON_INTERPRET=1)")
            return
        for b in plan["batches"]:
            record("experts", guarded(f"experts batch {b}", lambda b=b: moe_experts.compare(model, b, c, cfg.repeats)))
        say(table(payload["experts"], moe_experts.COLUMNS))

    def agreement():
        if plan["agree_requests"] >= 2:
            payload["agreement"] = guarded("agreement", lambda: batch_agreement(adapter, cfg, plan["agree_requests"]))
        if payload["agreement"]:
            say(table([payload["agreement"]], AGREE_COLUMNS))

    def loops():
        for b in plan["batches"]:
            projected = projected_loop_s(cfg, b, payload["forward"], c, b in plan["generate_batches"])
            if time.perf_counter() - t0 + projected > cfg.deadline_s:
                note(
                    f"loop batch {b}: would end past the {cfg.deadline_s:.0f}s deadline "
                    f"(projected {projected:.0f}s from the forward timings)"
                )
                continue
            row = guarded(f"loop batch {b}", lambda b=b: loop_overhead(adapter, cfg, b, b in plan["generate_batches"]))
            record("loop", row)
        say(table(payload["loop"], LOOP_COLUMNS))

    phase("forward", forwards)
    phase("sampler", sampler)
    phase("experts", experts)
    phase("agreement", agreement)

    def compiled():
        """`model.compile=step`'s step (one graph per bucket; CUDA graphs on CUDA) vs the eager step: host ops, step
        time, compile time, graphs and breaks, logits difference and tokens. Last: compiling the 26B step takes
        minutes, so a batch is skipped unless it is projected to end before the deadline: 1.5x the first batch's
        wall time for a later batch (its own compile), 3x for the fold (three graphs compile)."""
        from bench.cpu import step_graph_bench as step_graph

        mode = "reduce-overhead" if is_cuda(cfg.device) else None
        first_s = 0.0  # the first compiled batch's wall time, which the projections scale

        def fits(what: str, factor: float) -> bool:
            elapsed = time.perf_counter() - t0
            if elapsed + factor * first_s <= cfg.deadline_s:
                return True
            note(f"{what}: would end past the {cfg.deadline_s:.0f}s deadline (projected {factor * first_s:.0f}s)")
            return False

        for b in cfg.compiled_batches:
            if not fits(f"compiled batch {b}", 1.5):
                continue
            t = time.perf_counter()
            row = guarded(
                f"compiled batch {b}",
                lambda b=b: step_graph.compare(adapter, b, cfg.repeats, mode, cfg.compile_backend),
            )
            first_s = first_s or time.perf_counter() - t
            record("compiled", row and {**row, "mode": mode, "backend": cfg.compile_backend})
        say(table(payload["compiled"], COMPILED_COLUMNS))
        b = max(cfg.compiled_batches, default=0)
        if b and fits(f"compiled fold batch {b}", 3.0):  # a step with a third of its rows committing
            fold = guarded(
                f"compiled fold batch {b}",
                lambda: step_graph.compare_fold(adapter, b, max(1, b // 3), cfg.repeats, mode, cfg.compile_backend),
            )
            if fold:
                record("compiled_fold", {**fold, "mode": mode, "backend": cfg.compile_backend})
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
    if is_cuda(cfg.device):
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
    # `timeout` stops a run with SIGTERM: exit through Python, so each phase's `finally` writes what it measured
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
