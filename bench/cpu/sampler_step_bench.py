"""One denoising step's sampler work, ours vs transformers', side by side on the same raw logits.

Every contender starts from the same raw (pre-softcap) LM-head logits (B, C, V), float32, and does one
step's work after the forward:
- `reference` = transformers' `generate()`: the forward's soft cap (float32 copy, / cap, tanh, * cap,
  out of place), `LinearTemperatureScheduleLogitsProcessor`, softmax, `multinomial`, `argmax`,
  `EntropyBoundSampler.accept_canvas` (Categorical entropy, sort, cumsum, scatter), `renoise_canvas`
  (randint) and the `StableAndConfidentStoppingCriteria` check (history compare, Categorical entropy).
- `ours` = what the engine (`harness.engine.decode`) does per step on the torch path: `sampler_step` with
  `torch_sampling(draw_fast)` (soft cap and temperature in place on the logits workspace, the draw with
  counter-based uniforms, accept, re-noise tokens from the streams, the stop check) plus the step's one
  host read (finished flags, kept counts and the argmax canvas packed together). The step works in place,
  so each call first refills the workspace from the raw logits (`copy`, standing in for the LM head's
  write); `copy` alone is timed too, and `net` = ours - copy is the step itself.
- `fused` = the same `sampler_step` with `fused_sampling` (the Triton kernel `samplers.triton_draw`, what
  the engine uses on CUDA): it reads the raw logits once and writes the processed ones (the next step's
  self-conditioning input) to a model-dtype buffer, so no refill is needed. `fused_bf16` feeds it
  bfloat16 raw logits, as the engine does on a GPU (its LM head writes in the model dtype). The fused rows
  run where Triton can run: on a CUDA device, or on the CPU only under `TRITON_INTERPRET=1` (slow: use
  tiny sizes); elsewhere they are marked skipped.

Agreement (each contender's argmax vs torch.argmax of the float32 processed logits; entropy and confidence
vs float64 maths on them) is recorded next to the times. Ratios are reference / contender (> 1: the contender
is faster).

    python -m bench.cpu.sampler_step_bench [--batch 1 4] [--canvas 256] [--vocab 262144] [--repeats 3] [--device cuda]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
    EntropyBoundSampler,
    EntropyBoundSamplerConfig,
    LinearTemperatureScheduleLogitsProcessor,
    StableAndConfidentStoppingCriteria,
)

from bench.cpu.common import interleaved, machine_info, median, print_machine, ratio_stats, table, write_json
from harness.engine.decode import fused_sampling
from samplers.config import EntropyBoundConfig
from samplers.fast_draw import draw_fast
from samplers.sampler_step import process_logits, sampler_step, torch_sampling

MAX_STEPS, STEP = 48, 10  # a mid-schedule step: temperature ~0.72
SOFTCAP = 30.0  # DiffusionGemma's final_logit_softcapping


def make_logits(b: int, c: int, v: int, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    """Model-like raw logits: a noise floor plus a few strong tokens per position, with varying sharpness."""
    g = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(b, c, v, generator=g, device=device)
    top = torch.randint(0, v, (b, c, 4), generator=g, device=device)
    boost = torch.rand(b, c, 4, generator=g, device=device) * 16
    return logits.scatter_(-1, top, boost)


def fused_status(device: str | torch.device) -> str | None:
    """None when the fused kernel can run on `device`, else why not (recorded as `fused_skipped`)."""
    from samplers import triton_draw

    if triton_draw.triton is None:
        return "triton is not installed"
    if torch.device(device).type == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device"
    if triton_draw._KERNEL_INTERPRETED:
        return None
    return "CPU without TRITON_INTERPRET=1 (the kernel runs on CUDA; the interpreter only at tiny sizes)"


class ReferenceStep:
    """transformers' ops in generate()'s order (the forward's soft cap included), global RNG."""

    def __init__(self, canvas: int, vocab: int, entropy_bound: float = 0.1, softcap: float | None = SOFTCAP):
        self.sampler = EntropyBoundSampler(
            EntropyBoundSamplerConfig(entropy_bound=entropy_bound), canvas, vocab, MAX_STEPS
        )
        self.temperature = LinearTemperatureScheduleLogitsProcessor(0.4, 0.8, MAX_STEPS)
        self.stop = StableAndConfidentStoppingCriteria(stability_threshold=1, confidence_threshold=0.005)
        self.softcap = softcap

    def __call__(self, raw: torch.Tensor, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, v = raw.shape
        logits = raw.to(torch.float32)  # DiffusionGemmaForBlockDiffusion.forward, after the LM head
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        cur = torch.tensor(MAX_STEPS - STEP, dtype=torch.int32, device=raw.device)
        processed = self.temperature(None, logits, cur_step=cur)
        probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
        denoiser = torch.multinomial(probs.view(-1, v), num_samples=1).view(b, c)
        argmax = torch.argmax(processed, dim=-1)
        accepted = self.sampler.accept_canvas(canvas, denoiser, processed, cur)
        new_canvas = self.sampler.renoise_canvas(accepted, cur)
        self.stop.reset()
        _finished = self.stop(argmax, processed)
        return new_canvas, argmax


class EngineStep:
    """`harness.engine.decode.sampler_step` as the engine runs it, for rows 0..B-1 at canvas 0, step STEP.

    kind="torch": `torch_sampling(draw_fast)` on a float32 workspace refilled from the raw logits each call
    (the step processes the logits in place); kind="fused": `fused_sampling` (the Triton kernel) reading the
    raw logits, writing the processed ones to a `sc_dtype` buffer (the engine's self-conditioning input)."""

    def __init__(
        self,
        raw: torch.Tensor,
        kind: str = "torch",
        entropy_bound: float = 0.1,
        softcap: float | None = SOFTCAP,
        sc_dtype: torch.dtype | None = None,
    ):
        b, c, v = raw.shape
        dev = raw.device
        self.cfg = EntropyBoundConfig(entropy_bound=entropy_bound, max_steps=MAX_STEPS)
        self.kind, self.softcap, self.vocab = kind, softcap, v
        self.keys = torch.stack(
            [torch.arange(b), torch.zeros(b, dtype=torch.long), torch.full((b,), STEP, dtype=torch.long)]
        ).to(dev)
        self.temperature = self.cfg.temperatures(self.keys[2].cpu()).to(dev)
        self.history = torch.full((self.cfg.stability_steps, b, c), -1, dtype=torch.long, device=dev)
        if kind == "torch":
            self.workspace = torch.empty(b, c, v, dtype=torch.float32, device=dev)
            self.sample = torch_sampling(draw_fast)
        elif kind == "fused":
            self.workspace = None
            self.sc = torch.empty(b, c, v, dtype=sc_dtype or raw.dtype, device=dev)
            self.sample = fused_sampling(self.sc)
        else:
            raise ValueError(f"kind must be 'torch' or 'fused', got {kind!r}")

    def refill(self, raw: torch.Tensor) -> None:
        """What the LM head does before each step: write fresh raw logits into the workspace."""
        if self.workspace is not None:
            self.workspace.copy_(raw)

    def step(self, raw: torch.Tensor, canvas: torch.Tensor):
        x = self.workspace if self.workspace is not None else raw
        return sampler_step(
            self.cfg, self.sample, x, self.temperature, self.softcap, self.keys, canvas, self.history, self.vocab
        )

    def __call__(self, raw: torch.Tensor, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.refill(raw)
        out = self.step(raw, canvas)
        packed = torch.cat([out.finished.long()[:, None], out.kept[:, None], out.argmax], dim=1)
        packed.cpu()  # the engine's one device read per step
        return out.canvas, out.argmax


def _reference_stats(raw: torch.Tensor, temperature: torch.Tensor, softcap: float | None, block: int = 16):
    """torch.argmax of the float32 processed logits, and their entropy and max probability in float64 (torch's
    float32 softmax is itself off by ~1e-4 at V = 262,144); in blocks of positions to bound the memory."""
    b, c, v = raw.shape
    argmax = torch.empty(b, c, dtype=torch.long, device=raw.device)
    entropy = torch.empty(b, c, dtype=torch.float64, device=raw.device)
    confidence = torch.empty(b, c, dtype=torch.float64, device=raw.device)
    for i in range(b):
        for lo in range(0, c, block):
            x = process_logits(raw[i : i + 1, lo : lo + block].float().clone(), softcap, temperature[i : i + 1])
            argmax[i, lo : lo + block] = torch.argmax(x, -1)[0]
            logp = torch.log_softmax(x.double(), -1)
            entropy[i, lo : lo + block] = -(logp.exp() * logp).nan_to_num().sum(-1)[0]
            confidence[i, lo : lo + block] = logp.amax(-1).exp()[0]
    return argmax, entropy, confidence


def agreement(raw: torch.Tensor, fused: bool = False, softcap: float | None = SOFTCAP) -> dict[str, Any]:
    """Each contender's argmax / entropy / confidence vs torch's argmax and the float64 entropy and max
    probability of the same processed logits.

    `argmax_agree_*`: share of positions whose argmax equals torch.argmax (1.0 = all); `fused_bf16` reads
    bfloat16-rounded logits, so ties created by the rounding may resolve to another index there."""
    b, c, v = raw.shape
    temperature = EntropyBoundConfig(max_steps=MAX_STEPS).temperatures(torch.full((b,), STEP)).to(raw.device)
    ref_argmax, ref_h, ref_conf = _reference_stats(raw, temperature, softcap)
    u = torch.rand(b, c, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(raw.device)
    draws = {"ours": torch_sampling(draw_fast)(raw.float().clone(), temperature, softcap, u)}
    if fused:
        for name, dtype in (("fused", raw.dtype), ("fused_bf16", torch.bfloat16)):
            sc = torch.empty(
                b, c, v, dtype=torch.bfloat16 if name == "fused_bf16" else torch.float32, device=raw.device
            )
            draws[name] = fused_sampling(sc)(raw.to(dtype), temperature, softcap, u)
    row: dict[str, Any] = {}
    for name, d in draws.items():
        row[f"argmax_agree_{name}"] = float((d.argmax == ref_argmax).double().mean())
        suffix = "" if name == "ours" else f"_{name}"
        row[f"max_abs_entropy_diff{suffix}"] = float((d.entropy.double() - ref_h).abs().max())
        row[f"max_abs_confidence_diff{suffix}"] = float((d.confidence.double() - ref_conf).abs().max())
    row["argmax_equal"] = row["argmax_agree_ours"] == 1.0
    return row


def bench_one(
    b: int,
    c: int,
    v: int,
    repeats: int,
    warmup: int = 1,
    device: str = "cpu",
    fused: bool | None = None,
    softcap: float | None = SOFTCAP,
) -> dict[str, Any]:
    """Time the contenders on one (B, C, V) logits tensor. `fused=None`: run the kernel where it can run."""
    skipped = fused_status(device)
    if fused is False:
        skipped = "disabled"
    elif fused and skipped:
        raise RuntimeError(f"fused draw requested but it cannot run here: {skipped}")
    raw = make_logits(b, c, v, device)
    canvas = torch.randint(0, v, (b, c), device=device)
    row: dict[str, Any] = {
        "batch": b,
        "canvas": c,
        "vocab": v,
        "device": str(device),
        "softcap": softcap,
        **agreement(raw, fused=skipped is None, softcap=softcap),
    }
    ref, ours = ReferenceStep(c, v, softcap=softcap), EngineStep(raw, "torch", softcap=softcap)
    fns = {"reference": lambda: ref(raw, canvas), "copy": lambda: ours.refill(raw), "ours": lambda: ours(raw, canvas)}
    model_dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    if skipped is None:
        fused_f32 = EngineStep(raw, "fused", softcap=softcap, sc_dtype=model_dtype)
        raw_bf16 = raw.to(torch.bfloat16)
        fused_bf16 = EngineStep(raw_bf16, "fused", softcap=softcap, sc_dtype=torch.bfloat16)
        fns["fused"] = lambda: fused_f32(raw, canvas)
        fns["fused_bf16"] = lambda: fused_bf16(raw_bf16, canvas)
    times = interleaved(fns, repeats=repeats, warmup=warmup, device=device)
    net = [max(o - cp, 1e-9) for o, cp in zip(times["ours"], times["copy"])]
    row.update({name + "_s": median(t) for name, t in times.items()})
    row.update(ratio_stats(times["reference"], times["ours"]))
    row["ours_net_s"] = median(net)
    row["net_ratio_of_medians"] = median(times["reference"]) / row["ours_net_s"]
    row["inplace_ratio_of_medians"] = row["net_ratio_of_medians"]  # the name bench.cpu.run_all reads
    row["fused_skipped"] = skipped
    if skipped is None:
        row["fused_ratio_of_medians"] = median(times["reference"]) / median(times["fused"])
        row["fused_bf16_ratio_of_medians"] = median(times["reference"]) / median(times["fused_bf16"])
        row["ours_over_fused"] = median(times["ours"]) / median(times["fused"])
    row["rounds"] = times
    return row


COLUMNS = [
    "batch",
    "canvas",
    "vocab",
    "reference_s",
    "ours_s",
    "ours_net_s",
    "ratio_of_medians",
    "net_ratio_of_medians",
    "fused_s",
    "fused_bf16_s",
    "fused_ratio_of_medians",
    "argmax_agree_ours",
    "argmax_agree_fused",
    "argmax_agree_fused_bf16",
    "max_abs_entropy_diff",
]


def run(
    batches: list[int],
    canvas: int = 256,
    vocab: int = 262_144,
    repeats: int = 3,
    warmup: int = 1,
    threads: int | None = 2,
    device: str = "cpu",
    out_dir: str | None = None,
    quiet: bool = False,
    fused: bool | None = None,
) -> dict[str, Any]:
    if threads:
        torch.set_num_threads(threads)
    info = machine_info()
    rows = [bench_one(b, canvas, vocab, repeats, warmup, device, fused) for b in batches]
    payload = {"bench": "sampler_step", "machine": info, "repeats": repeats, "warmup": warmup, "rows": rows}
    path = write_json("sampler_step", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(table(rows, COLUMNS))
        if rows and rows[0]["fused_skipped"]:
            print(f"fused rows skipped: {rows[0]['fused_skipped']}")
        print(f"wrote {path}")
    return payload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    p.add_argument("--canvas", type=int, default=256)
    p.add_argument("--vocab", type=int, default=262_144)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args()
    run(a.batch, a.canvas, a.vocab, a.repeats, a.warmup, a.threads, a.device, out_dir=a.out_dir)


if __name__ == "__main__":
    main()
