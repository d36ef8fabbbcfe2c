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
    """Everything of one denoising step after the forward, for rows each at their own step.

    `x` (B, C, V) raw logits; `sample` is `torch_sampling(draw)` or `fused_sampling(...)`; `keys` (3, B)
    int64: seed, canvas index and step of each row; `positions`: `streams.position_keys(C)`, which a compiled
    caller passes in (see there). Pure tensor code with no host reads, so it can be captured whole by
    `torch.compile`.
    """
    seed, canvas_idx, step = keys[0], keys[1], keys[2]
    d: StepDraw = sample(
        x, temperature, softcap, streams.uniforms(seed, canvas_idx, step, canvas.shape[1], streams.SAMPLE, positions)
    )
    keep = cfg.remask(cfg.accept(d, step), d.confidence)
    noise = streams.tokens(seed, canvas_idx, step, canvas.shape[1], vocab, streams.RENOISE, positions)
    new_canvas = torch.where(keep, d.sampled, noise)
    mean_entropy = d.entropy.mean(-1)
    if cfg.adaptive_stop and history.shape[0] > 0:
        stable = (history == d.argmax[None]).all(-1).all(0)
        history = torch.cat([history[1:], d.argmax[None]])
        finished = stable & (mean_entropy < cfg.stop_entropy)
    elif cfg.adaptive_stop:  # stability_steps == 0: confidence alone
        finished = mean_entropy < cfg.stop_entropy
    else:
        finished = torch.zeros_like(mean_entropy, dtype=torch.bool)
    return StepOutput(new_canvas, d.argmax, history, finished, keep.sum(-1), mean_entropy, keep)
