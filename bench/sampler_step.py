"""One denoising step's sampler work, ours vs transformers', side by side on the same logits.

Reference = `generate()`'s `_denoising_step` after the forward: temperature scaling
(`LinearTemperatureScheduleLogitsProcessor`), softmax, `multinomial`, `argmax`, then
`EntropyBoundSampler.accept_canvas` (Categorical entropy, sort, cumsum, scatter) and `renoise_canvas`
(randint). generate() also recomputes the entropy in its stopping check; that is not counted here,
so the reported ratio is conservative.
Ours = what `harness.decode` does per step with `draw="fast"`: scale, `draw_fast` (per-row generators),
`EntropyBoundConfig.accept`, per-row renoise `randint`, and the mean-entropy stop check.

    python -m bench.sampler_step [--batch 1 4] [--canvas 256] [--vocab 262144] [--repeats 3]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
    EntropyBoundSampler,
    EntropyBoundSamplerConfig,
    LinearTemperatureScheduleLogitsProcessor,
)

from bench.common import interleaved, machine_info, median, print_machine, ratio_stats, table, write_json
from samplers.config import EntropyBoundConfig
from samplers.fast_draw import draw_fast

MAX_STEPS, STEP = 48, 10  # a mid-schedule step: temperature ~0.72


def make_logits(b: int, c: int, v: int, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    """Model-like logits: a noise floor plus a few strong tokens per position, with varying sharpness."""
    g = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(b, c, v, generator=g, device=device)
    top = torch.randint(0, v, (b, c, 4), generator=g, device=device)
    boost = torch.rand(b, c, 4, generator=g, device=device) * 16
    return logits.scatter_(-1, top, boost)


class ReferenceStep:
    """transformers' ops in generate()'s order, global RNG."""

    def __init__(self, canvas: int, vocab: int, entropy_bound: float = 0.1):
        self.sampler = EntropyBoundSampler(EntropyBoundSamplerConfig(entropy_bound=entropy_bound), canvas, vocab, MAX_STEPS)
        self.temperature = LinearTemperatureScheduleLogitsProcessor(0.4, 0.8, MAX_STEPS)

    def __call__(self, logits: torch.Tensor, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, v = logits.shape
        cur = torch.tensor(MAX_STEPS - STEP, dtype=torch.int32, device=logits.device)
        processed = self.temperature(None, logits, cur_step=cur)
        probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
        denoiser = torch.multinomial(probs.view(-1, v), num_samples=1).view(b, c)
        argmax = torch.argmax(processed, dim=-1)
        accepted = self.sampler.accept_canvas(canvas, denoiser, processed, cur)
        return self.sampler.renoise_canvas(accepted, cur), argmax


class FastStep:
    """Our per-step sampler work, as harness.decode runs it with per-sample streams and draw="fast".

    `inplace_scale`: scale into a reused buffer, the cost of `logits.div_(T)` on the forward's fresh
    logits; `logits / T` allocates B*C*V floats whose page faults cost more than the draw on this VM.
    """

    def __init__(self, batch: int, entropy_bound: float = 0.1, device: str = "cpu", inplace_scale: bool = False):
        self.cfg = EntropyBoundConfig(entropy_bound=entropy_bound, max_steps=MAX_STEPS)
        self.gens = [torch.Generator(device=device).manual_seed(i) for i in range(batch)]
        self.active = torch.ones(batch, dtype=torch.bool, device=device)
        self.inplace_scale = inplace_scale
        self._buf: torch.Tensor | None = None

    def __call__(self, logits: torch.Tensor, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, v = logits.shape
        t = self.cfg.temperature(MAX_STEPS - STEP)
        if self.inplace_scale:
            if self._buf is None or self._buf.shape != logits.shape:
                self._buf = torch.empty_like(logits)
            processed = torch.div(logits, t, out=self._buf)
        else:
            processed = logits / t
        draw = draw_fast(processed, self.gens, self.active)
        keep = self.cfg.remask(self.cfg.accept(draw, STEP), draw.confidence)
        noise = torch.stack([torch.randint(0, v, (c,), generator=g, device=logits.device) for g in self.gens])
        _confident = draw.entropy.mean(-1) < self.cfg.stop_entropy
        return torch.where(keep, draw.sampled, noise), draw.argmax


def agreement(logits: torch.Tensor) -> dict[str, Any]:
    """Our argmax / entropy / confidence vs the reference formulas on the same processed logits."""
    processed = logits / EntropyBoundConfig(max_steps=MAX_STEPS).temperature(MAX_STEPS - STEP)
    ours = draw_fast(processed, [torch.Generator(device=logits.device).manual_seed(0) for _ in range(logits.shape[0])])
    ref_h = torch.distributions.Categorical(logits=processed).entropy()
    ref_conf = torch.softmax(processed, -1).amax(-1)
    return {
        "argmax_equal": bool(torch.equal(ours.argmax, torch.argmax(processed, -1))),
        "max_abs_entropy_diff": float((ours.entropy - ref_h).abs().max()),
        "max_abs_confidence_diff": float((ours.confidence - ref_conf).abs().max()),
    }


def bench_one(b: int, c: int, v: int, repeats: int, warmup: int = 1, device: str = "cpu") -> dict[str, Any]:
    logits = make_logits(b, c, v, device)
    canvas = torch.randint(0, v, (b, c), device=device)
    ref, fast, fast_inplace = ReferenceStep(c, v), FastStep(b, device=device), FastStep(b, device=device, inplace_scale=True)
    row: dict[str, Any] = {"batch": b, "canvas": c, "vocab": v, **agreement(logits)}
    times = interleaved({"reference": lambda: ref(logits, canvas), "ours": lambda: fast(logits, canvas),
                         "ours_inplace": lambda: fast_inplace(logits, canvas)},
                        repeats=repeats, warmup=warmup, device=device)
    inplace = ratio_stats(times["reference"], times["ours_inplace"])
    row.update({"reference_s": median(times["reference"]), "ours_s": median(times["ours"]),
                "ours_inplace_s": median(times["ours_inplace"]), **ratio_stats(times["reference"], times["ours"]),
                "inplace_ratio_of_medians": inplace["ratio_of_medians"],
                "inplace_median_round_ratio": inplace["median_round_ratio"], "rounds": times})
    return row


def run(batches: list[int], canvas: int = 256, vocab: int = 262_144, repeats: int = 3, warmup: int = 1,
        threads: int | None = 2, device: str = "cpu", out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    if threads:
        torch.set_num_threads(threads)
    info = machine_info()
    rows = [bench_one(b, canvas, vocab, repeats, warmup, device) for b in batches]
    payload = {"bench": "sampler_step", "machine": info, "repeats": repeats, "warmup": warmup, "rows": rows}
    path = write_json("sampler_step", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(table(rows, ["batch", "canvas", "vocab", "reference_s", "ours_s", "ratio_of_medians", "median_round_ratio",
                           "ours_inplace_s", "inplace_ratio_of_medians", "argmax_equal", "max_abs_entropy_diff"]))
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
    p.add_argument("--out-dir", default=None)
    a = p.parse_args()
    run(a.batch, a.canvas, a.vocab, a.repeats, a.warmup, a.threads, out_dir=a.out_dir)


if __name__ == "__main__":
    main()
