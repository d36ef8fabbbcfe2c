"""What every ported strategy shares: the draw of a step's tokens, the AR-seeded first token, the answer type.

A strategy is a `MaskedSamplerConfig` subclass whose `step` is its authors' selection rule (`samplers.masked_rule`);
`plan`, `block_end` and the EOS rule stay the base class's unless a strategy says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.config import SamplerConfigError
from samplers.masked import MaskedSamplerConfig, draw

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import MaskedStepIn, MaskedStepOut


def step_tokens(x: MaskedStepIn, cfg: MaskedSamplerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, their probabilities), each (B, L): greedy at temperature 0, else drawn with the counter-based
    uniforms of `samplers.streams` keyed by the step's (seed, block, forward) keys (batch-invariant)."""
    from samplers import streams

    u = None
    if cfg.temperature > 0:
        seed, block, forward = x.keys
        u = streams.uniforms(seed, block, forward, x.block.shape[-1])
    return draw(x.logits, cfg, u)


def fill_out(x: MaskedStepIn, tokens: torch.Tensor, fill: torch.Tensor) -> MaskedStepOut:
    """The step's answer for a rule that only fills masks (no edit, no re-mask): the drawn token where `fill`; at a
    seeded block's first forward (its plan's `seeded`, the layout's AR seed) only its first position, the model's
    AR prediction, as the base rule does."""
    import torch

    from samplers.masked_rule import MaskedStepOut

    fresh = torch.tensor([p.seeded and f for p, f in zip(x.plans, x.first, strict=True)], device=fill.device)
    head = torch.zeros_like(fill)
    head[:, 0] = True
    fill = torch.where(fresh[:, None], head, fill) & (x.block == x.mask_id)
    none = torch.zeros_like(fill)
    return MaskedStepOut(torch.where(fill, tokens, x.block), fill, none, none, list(x.carry))


@dataclass
class StrategyConfig(MaskedSamplerConfig):
    """Base of the ported strategies: no editing, no re-masking (their authors' rules have neither)."""

    def validate(self) -> None:
        super().validate()
        for key in ("editing_threshold", "remask_ratio"):
            value = getattr(self, key)
            if value not in (None, 0, 0.0):
                raise SamplerConfigError(f"sampler.{key}: {self.name} has no such rule; must stay off, got {value!r}")

    def _threshold_unused(self, why: str) -> None:
        """For a strategy whose own knob replaces the base rule's probability threshold: it must stay null."""
        if self.threshold is not None:
            raise SamplerConfigError(f"sampler.threshold: must be null for {self.name} ({why}), got {self.threshold!r}")
