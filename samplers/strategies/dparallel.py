"""dParallel (Chen et al. 2025, arXiv 2509.26488): the entropy-threshold decoding its certainty-forcing distilled
model is run with, as its `generate(threshold=...)` / `get_transfer_index_entropy` do it (czg1225/dParallel@2ca4d14,
LLaDA/generate.py).

Each forward fills, among the current block's masked positions, the one of lowest entropy and every other whose
entropy is <= `entropy_threshold` (its test drops those > threshold), the entropy being -sum p log(p + 1e-12) of the
model's softmax in float64 (before any temperature); tokens are the argmax (its eval runs temperature 0). A block
takes forwards until it has no mask: no step schedule (its `steps` is unused in this mode), hence one step per
position at most. Blocks start at the prompt's end, and the whole answer is on the canvas (the later blocks' masks
are seen), as LLaDA's generate: the model yaml's layout (conf/model/dparallel_llada_8b.yaml). No EOS stop: its loop
runs every block; the engine's EOS stop (a committed EOS with no mask before it) returns the same answer up to that
EOS (`eos_early_stop: false` decodes the rest as it does).
Temperature > 0: its Gumbel-max draw (`add_gumbel_noise`, float64, torch's global RNG) samples the same
distribution as our inverse-CDF draw with `samplers.streams` uniforms, but not the same tokens.

On the uniform-state rule (DiffusionGemma): the nearest is `entropy_bound` (a bound on the accepted entropies'
sum, not a per-position threshold); a per-position entropy threshold over a canvas that is re-decided every step
would need its own acceptance rule, which DiffusionGemma's sampler group does not ship.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.masked import _is_num, _require
from samplers.strategies.base import StrategyConfig, fill_out, step_tokens

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import MaskedStepIn, MaskedStepOut


def entropy64(logits: torch.Tensor) -> torch.Tensor:
    """(B, L) float64 -sum p log(p + 1e-12) of softmax(logits) in float64, dParallel's certainty measure."""
    import torch

    p = torch.softmax(logits.double(), dim=-1)
    return -(p * torch.log(p + 1e-12)).sum(-1)


def entropy_threshold_fill(entropy: torch.Tensor, active: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, L) bool: the active positions with entropy <= threshold, plus each row's lowest-entropy active one."""
    import torch

    h = torch.where(active, entropy, torch.inf)
    fill = h <= threshold
    fill.scatter_(-1, h.argmin(-1, keepdim=True), True)
    return fill & active


@dataclass
class DParallelConfig(StrategyConfig):
    """dParallel's defaults: its eval.sh and generate.py main (threshold 0.5, block 32, greedy)."""

    name: str = "dparallel"
    threshold: float | None = None  # the probability threshold is not its rule
    entropy_threshold: float = 0.5
    steps_per_block: int = 1024
    cap_at_block: bool = True

    def validate(self) -> None:
        super().validate()
        self._threshold_unused("entropy_threshold is its rule")
        _require(
            _is_num(self.entropy_threshold) and self.entropy_threshold >= 0,
            "entropy_threshold",
            f"must be a number >= 0 (nats), got {self.entropy_threshold!r}",
        )

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        tokens, _ = step_tokens(x, self)
        fill = entropy_threshold_fill(entropy64(x.logits), x.block == x.mask_id, self.entropy_threshold)
        return fill_out(x, tokens, fill)
