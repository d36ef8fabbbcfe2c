"""One prepared GPU check on a full-size DiffusionGemma (26B-A4B shape, random bf16 weights, built on the GPU).

Measures, on one accelerator in under ~8 minutes on an H100/H200:
1. one denoiser forward over a 256-token canvas (with and without self-conditioning) vs one AR-style
   single-token encoder forward on the same cache, per batch size (the report: 3.2x for 256x the tokens),
   plus the MoE experts touched per layer in each;
2. peak memory (weights, and per phase);
3. our sampler step vs transformers' on real-size logits (bench.sampler_step on the device);
4. the decode loop's overhead over the bare forwards at a fixed step count (adaptive stop off), for our
   loop (fast / exact / reference draws) and for `generate()`.
Random weights route tokens almost uniformly, so "experts touched" is an upper bound, not the report's ~84.

`--tiny` runs the same code on the CPU with a tiny config (tests run it, so the script cannot rot).
Needs transformers >= 5.23 (DiffusionGemma); see docs/gpu_check.md to install it offline.

    python -m bench.gpu_check            # full size on cuda
    python -m bench.gpu_check --tiny     # seconds, on CPU
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from bench.common import interleaved, machine_info, median, print_machine, table, write_json

# google/diffusiongemma-26B-A4B-it text tower (Gemma 4 26B A4B): 30 layers (5 sliding : 1 full), 128 experts top-8,
# expert FFN 704 + shared dense FFN 2112, hidden 2816, 16 heads, KV heads 8 (sliding, head 256) / 2 (full, head 512).
FULL_TEXT = dict(
    vocab_size=262_144, hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16,
    num_key_value_heads=8, head_dim=256, global_head_dim=512, num_global_key_value_heads=2, num_experts=128,
    top_k_experts=8, moe_intermediate_size=704, sliding_window=1024, max_position_embeddings=262_144,
    final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
)
# The vision tower is never run here: a tiny one keeps ~0.5B parameters out of memory.
TINY_VISION = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                   num_attention_heads=1, num_key_value_heads=1, head_dim=16, patch_size=4,
                   position_embedding_size=16, pooling_kernel_size=1)


@dataclass
class CheckConfig:
    tiny: bool = False
    device: str = "cuda"
    dtype: str = "bfloat16"
    batches: list[int] = field(default_factory=lambda: [1, 8, 32])  # forward-cost batch sizes
    context: int = 1024  # prompt tokens in the cache
    steps: int = 16  # fixed denoising steps for the loop-overhead check
    repeats: int = 10
    sampler_batches: list[int] = field(default_factory=lambda: [1, 4])
    sampler_repeats: int = 5
    loop_repeats: int = 3

    @classmethod
    def tiny_cpu(cls) -> CheckConfig:
        return cls(tiny=True, device="cpu", dtype="float32", batches=[1, 2], context=8, steps=3, repeats=2,
                   sampler_batches=[1, 2], sampler_repeats=1, loop_repeats=1)


def model_config(tiny: bool):
    from transformers import DiffusionGemmaConfig

    if tiny:
        from models.tiny import diffusion_config

        return diffusion_config(112, canvas_length=16)
    return DiffusionGemmaConfig(text_config=FULL_TEXT, vision_config=TINY_VISION, canvas_length=256,
                                boi_token_id=255_999, eoi_token_id=258_882, image_token_id=258_880)


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

    return DiffusionGemmaAdapter.from_model(model, tokenizer, name="diffusiongemma-26B-A4B-shape-random", eos_token_ids=eos_ids)


class ExpertCounter:
    """Forward hooks on every MoE router: distinct experts chosen per layer call, only while counting
    (`unique` syncs the device, so the hooks stay idle during timed runs)."""

    def __init__(self, model):
        self.calls: list[int] = []
        self.active = False
        self.handles = [m.register_forward_hook(self._hook) for m in model.modules() if type(m).__name__.endswith("TextRouter")]

    def _hook(self, module, args, out) -> None:
        if self.active:
            self.calls.append(int(out[2].unique().numel()))

    @contextmanager
    def counting(self):
        self.calls, self.active = [], True
        try:
            yield self
        finally:
            self.active = False

    def mean(self) -> float:
        return sum(self.calls) / len(self.calls) if self.calls else 0.0


def _mem(device: str) -> dict[str, float]:
    if torch.device(device).type != "cuda":
        return {}
    return {"allocated_gib": torch.cuda.memory_allocated() / 2**30, "peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def _reset_peak(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _timed(fn, repeats: int, device: str, warmup: int = 1) -> list[float]:
    return interleaved({"f": fn}, repeats=repeats, warmup=warmup, device=device)["f"]


@torch.no_grad()
def forward_costs(adapter, b: int, cfg: CheckConfig, counter: ExpertCounter) -> dict[str, Any]:
    """Denoiser forward (256-token canvas; without / with self-conditioning) vs one single-token encoder forward."""
    dev, v, c = cfg.device, adapter.vocab_size, adapter.canvas_length
    g = torch.Generator(device=dev).manual_seed(b)
    ids = torch.randint(3, v, (b, cfg.context), generator=g, device=dev)
    _reset_peak(dev)
    state = adapter.prefill(ids, torch.ones_like(ids, dtype=torch.bool))
    canvas = torch.randint(0, v, (b, c), generator=g, device=dev)
    masks = adapter.canvas_masks(state, c)
    with counter.counting():
        logits = adapter.denoise(state, canvas, masks, None)
    experts_denoise = counter.mean()
    sc = (logits.float() / 0.8).to(adapter.model.dtype)
    del logits
    t_plain = _timed(lambda: adapter.denoise(state, canvas, masks, None), cfg.repeats, dev)
    t_sc = _timed(lambda: adapter.denoise(state, canvas, masks, sc), cfg.repeats, dev)
    mem_denoise = _mem(dev)
    del sc
    holder = {"state": state}
    token = torch.randint(3, v, (b, 1), generator=g, device=dev)

    def ar_step():  # one AR decode step: a 1-token causal encoder forward that appends to the cache
        holder["state"] = adapter.commit(holder["state"], token)

    with counter.counting():
        ar_step()
    experts_ar = counter.mean()
    t_ar = _timed(ar_step, cfg.repeats, dev, warmup=1)
    row = {"batch": b, "context": cfg.context, "canvas": c, "denoise_ms": 1e3 * median(t_plain),
           "denoise_selfcond_ms": 1e3 * median(t_sc), "ar_token_ms": 1e3 * median(t_ar)}
    row["denoise_over_ar"] = row["denoise_ms"] / row["ar_token_ms"]
    row["denoise_selfcond_over_ar"] = row["denoise_selfcond_ms"] / row["ar_token_ms"]
    row.update({"experts_per_layer_denoise": experts_denoise, "experts_per_layer_ar": experts_ar,
                **{f"denoise_{k}": val for k, val in mem_denoise.items()}})
    return row


@torch.no_grad()
def loop_overhead(adapter, cfg: CheckConfig, b: int = 1) -> dict[str, Any]:
    """Wall of one canvas at a fixed step count: bare forwards vs our loop (3 draw modes) vs generate()."""
    from harness.decode import BlockDiffusionDecoder
    from harness.records import GenerationRequest
    from samplers.config import EntropyBoundConfig

    dev, v, c, s = cfg.device, adapter.vocab_size, adapter.canvas_length, cfg.steps
    ids = torch.randint(3, v, (b, cfg.context), generator=torch.Generator(device=dev).manual_seed(7), device=dev)
    reqs = [GenerationRequest(str(i), ids[i].tolist(), seed=i, max_new_tokens=c) for i in range(b)]
    knobs = dict(max_steps=s, adaptive_stop=False)
    decs = {"ours_fast": BlockDiffusionDecoder(adapter, EntropyBoundConfig(draw="fast", **knobs)),
            "ours_exact": BlockDiffusionDecoder(adapter, EntropyBoundConfig(draw="exact", **knobs)),
            "ours_reference": BlockDiffusionDecoder(adapter, EntropyBoundConfig(random_stream="reference", **knobs))}
    sched = EntropyBoundConfig(**knobs)

    def bare():
        state = adapter.prefill(ids, torch.ones_like(ids, dtype=torch.bool))
        masks = adapter.canvas_masks(state, c)
        canvas, sc = torch.randint(0, v, (b, c), device=dev), None
        for step in range(s):
            logits = adapter.denoise(state, canvas, masks, sc)
            sc = (logits / sched.temperature(s - step)).to(adapter.model.dtype)

    def hf():  # confidence_threshold ~0: generate()'s adaptive stop never fires, so it runs all s steps
        adapter.model.generate(ids, max_new_tokens=c, max_denoising_steps=s, confidence_threshold=1e-30, pad_token_id=0)

    nfe = {m: sum(r.nfe for r in d.generate(reqs)) for m, d in decs.items()}
    fns = {"bare": bare, **{m: (lambda d=d: d.generate(reqs)) for m, d in decs.items()}, "generate": hf}
    _reset_peak(dev)
    times = interleaved(fns, repeats=cfg.loop_repeats, warmup=1, device=dev)
    base = median(times["bare"])
    row: dict[str, Any] = {"batch": b, "steps": s, "bare_s": base, **_mem(dev)}
    for m in list(decs) + ["generate"]:
        row[f"{m}_s"] = median(times[m])
        row[f"{m}_overhead"] = median(times[m]) / base - 1.0
        row[f"{m}_overhead_ms_per_step"] = 1e3 * (median(times[m]) - base) / s
    row["nfe_ok"] = all(n == s * b for n in nfe.values())
    return row


def run(cfg: CheckConfig, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    try:
        from transformers import DiffusionGemmaForBlockDiffusion  # noqa: F401
    except ImportError as e:
        import transformers

        raise SystemExit(f"transformers {transformers.__version__} has no DiffusionGemma ({e}); see docs/gpu_check.md") from e
    from bench import sampler_step
    from models.tiny import char_tokenizer

    if torch.device(cfg.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device; use --tiny for the CPU smoke run")
    dtype = getattr(torch, cfg.dtype)
    info = machine_info()
    t0 = time.perf_counter()
    _reset_peak(cfg.device)
    model = build_model(model_config(cfg.tiny), cfg.device, dtype)
    build = {"build_s": time.perf_counter() - t0, "parameters": sum(p.numel() for p in model.parameters()),
             "experts_implementation": getattr(model.config, "_experts_implementation", None),
             "attn_implementation": getattr(model.config, "_attn_implementation", None), **_mem(cfg.device)}
    adapter = make_adapter(model, char_tokenizer(), eos_ids=[1])
    counter = ExpertCounter(model)
    forwards = [forward_costs(adapter, b, cfg, counter) for b in cfg.batches]
    loop = loop_overhead(adapter, cfg)
    v, c = adapter.vocab_size, adapter.canvas_length
    sampler = [sampler_step.bench_one(b, c, v, cfg.sampler_repeats, warmup=1, device=cfg.device)
               for b in cfg.sampler_batches]
    for row in sampler:
        row.pop("rounds", None)
    payload = {"bench": "gpu_check", "tiny": cfg.tiny, "config": asdict(cfg), "machine": info, "build": build,
               "forward": forwards, "loop": loop, "sampler": sampler, "total_s": time.perf_counter() - t0,
               **({"peak_gib": torch.cuda.max_memory_allocated() / 2**30} if cfg.device.startswith("cuda") else {})}
    path = write_json("gpu_check_tiny" if cfg.tiny else "gpu_check", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print("build: " + ", ".join(f"{k}={val}" for k, val in build.items()))
        print(table(forwards, ["batch", "context", "canvas", "denoise_ms", "denoise_selfcond_ms", "ar_token_ms",
                               "denoise_over_ar", "denoise_selfcond_over_ar", "experts_per_layer_denoise",
                               "experts_per_layer_ar"]))
        print(table([loop], ["batch", "steps", "bare_s", "ours_fast_s", "ours_fast_overhead", "ours_exact_overhead",
                             "ours_reference_overhead", "generate_s", "generate_overhead", "nfe_ok"]))
        print(table(sampler, ["batch", "canvas", "vocab", "reference_s", "ours_s", "ratio_of_medians", "ours_inplace_s",
                              "inplace_ratio_of_medians", "argmax_equal", "max_abs_entropy_diff"]))
        print(f"total {payload['total_s']:.1f}s; wrote {path}")
    return payload


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny config on CPU (smoke test)")
    p.add_argument("--device", default=None)
    p.add_argument("--batches", type=int, nargs="+", default=None)
    p.add_argument("--context", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: 1 with --tiny, torch's otherwise)")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    cfg = CheckConfig.tiny_cpu() if a.tiny else CheckConfig()
    threads = a.threads or (1 if a.tiny else None)
    if threads:  # tiny models on a shared CPU: multi-threaded small ops wait on busy cores
        torch.set_num_threads(threads)
    for key in ("device", "batches", "context", "steps", "repeats"):
        if getattr(a, key) is not None:
            setattr(cfg, key, getattr(a, key))
    run(cfg, a.out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
