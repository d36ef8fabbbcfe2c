"""Fast-dLLM v2 (Wu et al. 2025, arXiv 2509.26328): block diffusion with sub-blocks and a confidence threshold, as
its `Fast_dLLM_QwenForCausalLM.batch_sample` does it (NVlabs/Fast-dLLM@8292f3c, v2/generation_functions.py).

Its loop, per block of `block_length` (its `bd_size`, 32): the sub-blocks of `sub_block_length` (its
`small_block_size`, 8) are decoded left to right; a sub-block takes forwards until it has no mask, each forward
filling its masked positions whose drawn token's probability is > `threshold` (strict), and always the most probable
one (the first at a tie: argmax); positions of later sub-blocks are never filled before their turn. Logits are the
model's next-token logits shifted by one (position j reads the logits of j - 1), as the engine hands them over for a
`shifted_logits` model. A finished block is run once more to update the KV cache, and that forward's last logits
give the next block's first token (argmax: the AR-seeded block start of the layout, not this rule). Its cache rule:
the prefix is a KV cache written only by those update forwards (block-causal attention); each fill forward recomputes
the whole current block over it (`use_block_cache=False`, its eval default); `use_block_cache=True` (DualCache) also
caches the block's own K/V at a sub-block's first forward and recomputes only the sub-block after it (stale K/V of
the block's other positions, a speed/accuracy trade): not reproduced here, so there is no knob for it.
EOS: a row is done once its stop token is filled; its block is still finished and the answer cut after the first
stop token (the engine's rule: a committed EOS with no mask before it ends the row, the same tokens).

On the uniform-state rule (DiffusionGemma): not applicable as such. Its threshold part is `confidence_threshold`
(which keeps >=, not >); the sub-block restriction needs a masked block whose filled positions stay filled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.masked import _is_int, _require
from samplers.strategies.base import StrategyConfig, fill_out, step_tokens

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import MaskedStepIn, MaskedStepOut


def current_sub_block(active: torch.Tensor, size: int) -> torch.Tensor:
    """(B, L) bool: the masked positions of each row's leftmost sub-block of `size` that still holds a mask."""
    import torch

    sub = torch.arange(active.shape[-1], device=active.device) // size
    big = active.shape[-1] // size + 1
    first = torch.where(active, sub, big).min(-1, keepdim=True).values
    return active & (sub == first)


def threshold_fill(prob: torch.Tensor, eligible: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, L) bool: the eligible positions with probability > threshold, plus each row's most probable eligible one
    (the first at a tie); nothing in a row with none eligible."""
    import torch

    p = torch.where(eligible, prob.float(), -torch.inf)
    fill = p > threshold
    fill.scatter_(-1, p.argmax(-1, keepdim=True), True)
    return fill & eligible


@dataclass
class FastDllmV2Config(StrategyConfig):
    """Fast-dLLM v2's defaults: its eval.py (threshold 0.9, small_block_size 8, greedy; bd_size 32 is the model's).
    One step per position at most (each fills one or more), so `steps_per_block` caps at the block length."""

    name: str = "fast_dllm_v2"
    threshold: float | None = 0.9
    sub_block_length: int = 8
    steps_per_block: int = 1024
    cap_at_block: bool = True
    top_p: float | None = 0.95  # its default; read only when temperature > 0

    def validate(self) -> None:
        super().validate()
        _require(self.threshold is not None, "threshold", "must be set for fast_dllm_v2 (its rule is the threshold)")
        _require(
            _is_int(self.sub_block_length) and self.sub_block_length > 0,
            "sub_block_length",
            f"must be an integer > 0, got {self.sub_block_length!r}",
        )
        if self.block_length is not None:
            _require(
                self.block_length % self.sub_block_length == 0,
                "sub_block_length",
                f"must divide block_length ({self.block_length}), got {self.sub_block_length}",
            )

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        tokens, prob = step_tokens(x, self)
        eligible = current_sub_block(x.block == x.mask_id, self.sub_block_length)
        return fill_out(x, tokens, threshold_fill(prob, eligible, self.threshold))
