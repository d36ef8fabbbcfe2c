"""WINO (wide-in, narrow-out): draft every masked position above a low threshold, then re-mask the block's
committed tokens that fail verification. Follows the authors' `decoding_wino` (Feng-Hong/WINO-DLLM
@9549a1d, LLaDA/decoding.py), one row at a time:

    draft   masked positions with confidence > `threshold` (0.6), at most min(max(int(0.7 * masks), 5), 20) (the
            most confident), at least the most confident one
    verify  when this step drafted more than one token: the tokens committed before this step whose verification
            probability is < `threshold_back` (0.9) are re-masked, at most `last_accept - 1` of them (the lowest)
            once as many as `last_accept` fail, `last_accept` being the previous step's draft count (30 at a
            block's first step)

The block ends when it holds no mask (the authors' loop has no step cap; `steps_per_block` is a safety cap here).
Confidence is the softmax probability (float64) of the drawn token; verification the probability of the token in
place. The authors verify with a shadow copy of the block run in the same forward: the block's positions again,
as mask tokens, each shadow query seeing the real block except its own position (and the other shadow tokens), no
real query seeing the shadow. `verify: shadow` reads that shadow's logits, which the layout passes as the second
half of `logits` (B, 2L, V). `verify: self` reads the same forward's logits at the token's own position (the
token visible to itself): not the authors' rule (a model trained on masked positions only is not asked what a
visible token should be), the one the engine can give without a shadow layout. docs/samplers.md states the gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from samplers.masked import MaskedSamplerConfig, _is_int, _is_num, _require, draw
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn, MaskedStepOut
from samplers.strategies.common import (
    check_own_rule,
    filled_or_capped,
    prob_of,
    refuse_seeded,
    row_carry,
    top_k,
    uniforms,
)

if TYPE_CHECKING:
    import torch

VERIFY = ("shadow", "self")


@dataclass
class WinoConfig(MaskedSamplerConfig):
    """WINO's knobs; defaults are the authors' (`decoding_wino`: threshold 0.6, threshold_back 0.9)."""

    name: str = "wino"
    threshold: float | None = 0.6  # wide in: draft every masked position above this
    threshold_back: float = 0.9  # narrow out: re-mask a committed token whose verification is below this
    accept_ratio: float = 0.7  # a step drafts at most min(max(int(accept_ratio * masks), accept_min), accept_max)
    accept_min: int = 5
    accept_max: int = 20
    first_last_accept: int = 30  # `last_accept` at a block's first step (the authors' constant)
    verify: str = "shadow"  # shadow (the authors': logits (B, 2L, V), the shadow block second) | self
    steps_per_block: int = 1024  # a safety cap: the authors loop until the block has no mask
    eos_at_block_end: ClassVar[bool] = True  # a committed EOS may still be re-masked: checked once a block is final

    def validate(self) -> None:
        super().validate()
        check_own_rule(self)
        _require(
            _is_num(self.threshold_back) and 0.0 <= self.threshold_back <= 1.0,
            "threshold_back",
            f"must be in [0, 1], got {self.threshold_back!r}",
        )
        _require(
            _is_num(self.accept_ratio) and 0.0 < self.accept_ratio <= 1.0,
            "accept_ratio",
            f"must be in (0, 1], got {self.accept_ratio!r}",
        )
        for key in ("accept_min", "accept_max", "first_last_accept"):
            value = getattr(self, key)
            _require(_is_int(value) and value > 0, key, f"must be an integer > 0, got {value!r}")
        _require(
            self.accept_min <= self.accept_max,
            "accept_min",
            f"must be <= accept_max ({self.accept_max}), got {self.accept_min}",
        )
        _require(self.verify in VERIFY, "verify", f"must be one of {VERIFY}, got {self.verify!r}")

    def plan(self, masks: int, max_new_tokens: int, block_length: int, seeded: bool = False) -> BlockPlan:
        """No schedule: every step drafts by threshold; `steps_per_block` only caps the block's forwards."""
        refuse_seeded(self, seeded)
        return BlockPlan(self.steps_per_block)

    @property
    def shadow_queries(self) -> bool:
        """The engine adds the shadow block's L verify queries to the forward (`samplers.masked_rule`)."""
        return self.verify == "shadow"

    def block_end(self, progress: BlockProgress) -> tuple[bool, bool]:
        return filled_or_capped(progress)

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        import torch

        width = x.block.shape[1]
        if self.verify == "shadow" and x.logits.shape[1] != 2 * width:
            raise ValueError(
                f"sampler.verify=shadow: logits must hold the block and its shadow copy ({2 * width} positions), "
                f"got {x.logits.shape[1]} (a layout without the shadow block: sampler.verify=self)"
            )
        logits = x.logits[:, :width]
        back_logits = x.logits[:, width:] if self.verify == "shadow" else logits
        tok = draw(logits, self, uniforms(self, x))[0]
        masked = x.block == x.mask_id
        conf = prob_of(logits, tok)
        back = prob_of(back_logits, x.block.clamp(max=logits.shape[-1] - 1))
        first = torch.tensor(self.first_last_accept, device=tok.device)
        last = torch.stack([c["last_accept"] if c else first for c in row_carry(x.carry, len(tok))])
        fill = self._draft(conf, masked)
        accepted = fill.sum(-1)
        remasked = self._narrow_out(back, ~masked & x.editable, accepted, last)
        block = torch.where(fill, tok, x.block).masked_fill(remasked, x.mask_id)
        carry = [{"last_accept": a} for a in accepted]  # 0-d tensors: no host read
        return MaskedStepOut(block, fill, torch.zeros_like(fill), remasked, carry)

    def _draft(self, conf: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """Wide in: above the threshold, capped at the step's most confident `cap`, at least the most confident."""
        import torch

        n = masked.sum(-1)
        cap = (n * self.accept_ratio).long().clamp(min=self.accept_min, max=self.accept_max)
        high = masked & (conf > self.threshold)
        over = high.sum(-1) > cap
        keep = torch.where(over, cap, torch.where(high.any(-1), n, torch.ones_like(n)))
        pick = top_k(conf, keep, torch.where((over | ~high.any(-1))[:, None], masked, high))
        return pick & masked

    def _narrow_out(
        self, back: torch.Tensor, committed: torch.Tensor, accepted: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        """Narrow out: the committed tokens verified below `threshold_back`, the `last - 1` lowest once `last` of
        them fail; nothing when this step drafted one token."""
        import torch

        low = committed & (back < self.threshold_back)
        many = low.sum(-1) >= last
        lowest = top_k(back, (last - 1).clamp(min=0), committed, largest=False)
        return torch.where(many[:, None], lowest, low) & (accepted > 1)[:, None]
