"""One denoising step's draws from temperature-scaled logits: sample, argmax, entropy, confidence.

Every draw function has the signature `draw(logits (B, C, V), u (B, C) float64 uniforms) -> StepDraw`;
the uniforms come from the counter-based streams (`samplers.streams`), so the sampled token of a
position is a pure function of its logits and its key. Implementations:
- `draw_reference`: exactly transformers' ops and global-RNG call order (bit-for-bit parity with
  `generate()`); it ignores `u` and draws from torch's global generator;
- `draw_exact`: softmax + inverse CDF over the whole vocabulary in float64 (the plain definition);
- `draw_fast` (samplers.fast_draw): chunked two-level inverse CDF from one exp pass (the CPU default);
- `fused_draw` (samplers.triton_draw): the same two-level draw as one Triton kernel (CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepDraw:
    sampled: torch.Tensor  # (B, C) long: a token drawn from softmax(logits) per position
    argmax: torch.Tensor  # (B, C) long
    entropy: torch.Tensor  # (B, C) float32, nats
    confidence: torch.Tensor  # (B, C) float32, max softmax probability


def draw_reference(logits: torch.Tensor, u: torch.Tensor | None = None) -> StepDraw:
    """transformers' `_denoising_step` + `EntropyBoundSampler.accept_canvas` ops, global RNG, all rows."""
    b, c, v = logits.shape
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    sampled = torch.multinomial(probs.view(-1, v), num_samples=1).view(b, c)
    argmax = torch.argmax(logits, dim=-1)
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    return StepDraw(sampled, argmax, entropy, probs.amax(-1))


def inverse_cdf(cum: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Index j with cum[j-1] <= target < cum[j] along the last dim, never a zero-mass index."""
    idx = torch.searchsorted(cum, target[..., None], right=True).squeeze(-1)
    last_positive = (cum < cum[..., -1:]).sum(-1)  # the last index whose term is > 0
    return torch.minimum(idx, last_positive)


def draw_exact(logits: torch.Tensor, u: torch.Tensor) -> StepDraw:
    """The plain definition: full softmax, float64 cumulative sum, one uniform per position."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    cum = probs.double().cumsum(-1)
    sampled = inverse_cdf(cum, u * cum[..., -1])
    logp = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(probs * logp).nan_to_num().sum(-1)
    return StepDraw(sampled, torch.argmax(logits, dim=-1), entropy, probs.amax(-1))
