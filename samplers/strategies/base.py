"""What every ported strategy shares: the draw of a step's tokens and the answer type, and the guard that keeps a
strategy off an engine that composes the masked rule itself.

A strategy is a `MaskedSamplerConfig` subclass whose `step` is its authors' selection rule (`samplers.masked_rule`).
Until the engine calls `step` (issue 52 item 1), `harness.engine.masked` would run such a config through its own
composition (`refine` with the config's knobs): a different rule under the strategy's name. That engine calls
`block_end` with six positional arguments, the rule-interface engine with one `BlockProgress`; the legacy call is
refused here, naming the sampler, so a run never reports the wrong rule as the strategy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.config import SamplerConfigError
from samplers.masked import MaskedSamplerConfig, draw

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import BlockProgress, MaskedStepIn, MaskedStepOut


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
    """The step's answer for a rule that only fills masks (no edit, no re-mask): the drawn token where `fill`."""
    import torch

    from samplers.masked_rule import MaskedStepOut

    fill = fill & (x.block == x.mask_id)
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

    def block_end(self, progress: BlockProgress, *legacy) -> tuple[bool, bool]:
        if legacy:
            raise SamplerConfigError(
                f"sampler={self.name}: its rule is its own step(); this engine composes the masked rule itself "
                "(issue 52 item 1 not merged), so it would decode another rule under this name"
            )
        return super().block_end(progress)
