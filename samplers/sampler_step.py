"""Everything of one denoising step after the forward: softcap, temperature, draw, accept, remask, re-noise, stop.

Pure tensor code with no host reads, shared by the eager engine (`harness.engine.decode`) and the whole compiled step
(`harness.engine.step_graph`), which is why it lives apart from both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from samplers import streams
from samplers.config import SamplerConfig
from samplers.draw import StepDraw
from samplers.fast_draw import draw_whole


@dataclass
class StepOutput:
    canvas: torch.Tensor  # (B, C) next canvas: accepted samples, fresh noise elsewhere
    argmax: torch.Tensor  # (B, C) argmax canvas (what a stopped canvas commits)
    history: torch.Tensor  # (S, B, C) last argmax canvases, for the stability test
    finished: torch.Tensor  # (B,) bool: stable and confident (adaptive stop)
    kept: torch.Tensor  # (B,) long: positions that kept their sampled token
    mean_entropy: torch.Tensor  # (B,) float32
    keep: torch.Tensor  # (B, C) bool: which positions kept their sampled token (read only to capture trajectories)


def process_logits(x: torch.Tensor, softcap: float | None, temperature: torch.Tensor) -> torch.Tensor:
    """In place: cap * tanh(x / cap) (transformers' op order), then divide each row by its temperature."""
    if softcap:
        x.div_(softcap).tanh_().mul_(softcap)
    return x.div_(temperature[:, None, None])


def processed_logits(x: torch.Tensor, softcap: float | None, temperature: torch.Tensor) -> torch.Tensor:
    """`process_logits` out of place, in float32: the same ops in the same order, so the same values. `temperature`
    has x's leading dims ((B,) for (B, C, V), (N, 1) for (N, K) chunks of flat rows)."""
    y = x.float()
    if softcap:
        y = torch.tanh(y / softcap) * softcap
    return y / temperature.reshape(temperature.shape + (1,) * (x.dim() - temperature.dim()))


def graph_sampling(raw: torch.Tensor):
    """`sample` for a compiled step over the raw (B, C, V) logits `raw` of the model's LM head, called with x =
    `processed_logits(raw, ...)`: `draw_whole` recomputes the two chunks per position it reads again from `raw`,
    so x exists only inside the kernel that reads `raw` once and reduces it (see `samplers.fast_draw.draw_whole`)."""

    def sample(x: torch.Tensor, temperature: torch.Tensor, softcap: float | None, u: torch.Tensor) -> StepDraw:
        rows = temperature.repeat_interleave(raw.shape[1])[:, None]  # each flat row's temperature
        return draw_whole(x, u, raw, lambda chunk: processed_logits(chunk, softcap, rows))

    return sample


def torch_sampling(draw):
    """`sample(raw, temperature, softcap, u)` from a torch draw: process the logits in place, then draw.
    The processed logits stay in `raw`, which is the next step's self-conditioning input."""

    def sample(x: torch.Tensor, temperature: torch.Tensor, softcap: float | None, u: torch.Tensor) -> StepDraw:
        return draw(process_logits(x, softcap, temperature), u)

    return sample


class StreamNoise:
    """The counter-based noise of the continuous engine: each row's uniforms and re-noise tokens are a pure function
    of its (seed, canvas index, step) key (`samplers.streams`), so a row draws the same at any batch position."""

    def __init__(self, keys: torch.Tensor, vocab: int, positions: torch.Tensor | None = None):
        self.keys, self.vocab, self.positions = keys, vocab, positions

    def uniforms(self, c: int) -> torch.Tensor:
        k = self.keys
        return streams.uniforms(k[0], k[1], k[2], c, streams.SAMPLE, self.positions)

    def tokens(self, c: int) -> torch.Tensor:
        k = self.keys
        return streams.tokens(k[0], k[1], k[2], c, self.vocab, streams.RENOISE, self.positions)


class GlobalNoise:
    """transformers' `generate()` noise: torch's global RNG for every row at once. The draw (`draw_reference`)
    takes its one `multinomial` over B*C rows itself, so `uniforms` is None; then one `randint(B, C)` re-noises."""

    def __init__(self, rows: int, vocab: int, device: torch.device | str):
        self.rows, self.vocab, self.device = rows, vocab, device

    def uniforms(self, c: int) -> None:
        return None

    def tokens(self, c: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (self.rows, c), device=self.device)


@dataclass
class UniformStepIn:
    """One uniform-state step after the forward, for rows each at their own step (the rule's own input type).

    `stopped` (B,) bool: rows that already stopped in this canvas (None: the caller retires them, as the continuous
    engine does); lockstep passes it, because `generate()` keeps finished rows computed but frozen."""

    logits: torch.Tensor  # (B, C, V) raw logits
    temperature: torch.Tensor  # (B,) per-row temperature
    softcap: float | None
    step: torch.Tensor  # (B,) long: each row's step in its canvas
    noise: StreamNoise | GlobalNoise
    canvas: torch.Tensor  # (B, C) the canvas that went into the forward
    history: torch.Tensor  # (S, B, C) last argmax canvases
    stopped: torch.Tensor | None = None
    argmax: torch.Tensor | None = None  # (B, C) last argmax canvas (what a stopped row keeps); with `stopped`


def uniform_step(cfg: SamplerConfig, sample, inp: UniformStepIn) -> StepOutput:
    """The uniform-state rule: temperature, draw, accept, remask, re-noise, adaptive stop. Pure tensor code with no
    host reads, so it can be captured whole by `torch.compile`. `sample` is `torch_sampling(draw)` or
    `graph_sampling(raw)`; with `GlobalNoise` it must be `torch_sampling(draw_reference)`."""
    c = inp.canvas.shape[1]
    d: StepDraw = sample(inp.logits, inp.temperature, inp.softcap, inp.noise.uniforms(c))
    keep = cfg.remask(cfg.accept(d, inp.step), d.confidence)
    new_canvas = torch.where(keep, d.sampled, inp.noise.tokens(c))
    argmax, history, mean_entropy = d.argmax, inp.history, d.entropy.mean(-1)
    if inp.stopped is not None:  # rows that already stopped keep their canvas and argmax
        argmax = torch.where(inp.stopped[:, None], inp.argmax, argmax)
        new_canvas = torch.where(inp.stopped[:, None], inp.canvas, new_canvas)
    if cfg.adaptive_stop and history.shape[0] > 0:
        stable = (history == argmax[None]).all(-1).all(0)
        history = torch.cat([history[1:], argmax[None]])
        finished = stable & (mean_entropy < cfg.stop_entropy)
    elif cfg.adaptive_stop:  # stability_steps == 0: confidence alone
        finished = mean_entropy < cfg.stop_entropy
    else:
        finished = torch.zeros_like(mean_entropy, dtype=torch.bool)
    if inp.stopped is not None:
        finished = finished | inp.stopped
    return StepOutput(new_canvas, argmax, history, finished, keep.sum(-1), mean_entropy, keep)


def sampler_step(
    cfg: SamplerConfig,
    sample,
    x: torch.Tensor,
    temperature: torch.Tensor,
    softcap: float | None,
    keys: torch.Tensor,
    canvas: torch.Tensor,
    history: torch.Tensor,
    vocab: int,
    positions: torch.Tensor | None = None,
) -> StepOutput:
    """`uniform_step` with the counter-based noise, for rows each at their own step (the continuous engine).

    `x` (B, C, V) raw logits; `keys` (3, B) int64: seed, canvas index and step of each row; `positions`:
    `streams.position_keys(C)`, which a compiled caller passes in (see there)."""
    noise = StreamNoise(keys, vocab, positions)
    return uniform_step(cfg, sample, UniformStepIn(x, temperature, softcap, keys[2], noise, canvas, history))
