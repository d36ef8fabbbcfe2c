"""EB-Sampler (Ben-Hamu et al. 2025, arXiv 2505.24857, "Accelerated Sampling from Masked Diffusion Models via
Entropy Bounded Unmasking"): each forward unmasks the largest set of masked positions, taken in increasing order of
their entropy (the error proxy), whose entropies' sum minus their largest stays <= `gamma`; at least one.

Its authors published no code that we found (searched: GitHub code and issues). The rule is the paper's; the code
we compare with is PC-Sampler's port (NEUIR/PC-Sampler@8b106b0, src/generate.py `generate_with_eb_sampler`): the
entropy of `Categorical(logits=...)` (float32, the logits' own normalisation), sorted ascending,
k = #{i : cumsum_i - cummax_i <= gamma} clamped to [1, masks], the argmax tokens at those positions. That port
decodes the whole answer as one block with no EOS stop and no step count (a forward per step until no mask is
left): `block_length: answer`-style blocks are the model's layout; with smaller blocks the bound applies within
the current block, as the paper's semi-autoregressive LLaDA runs do. Ties in the sort (equal entropies): its
`argsort` is not stable, ours is (the lower position first); only exact float ties differ.
Temperature > 0: its Gumbel-max draw (global RNG) and our inverse-CDF draw sample the same distribution, not the
same tokens.

On the uniform-state rule (DiffusionGemma): this bound is DiffusionGemma's own acceptance, `sampler=entropy_bound`
(samplers/config.py `EntropyBoundConfig`: sorted entropies, keep while cumsum - h <= entropy_bound, i.e. the sum of
the kept entropies less the largest, the first always kept): the same set, applied each step to the whole canvas,
whose unaccepted positions are re-noised instead of staying masked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.masked import _is_num, _require
from samplers.ranking import sort_rank
from samplers.strategies.base import StrategyConfig, fill_out, step_tokens

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import MaskedStepIn, MaskedStepOut


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """(B, L) float32 entropy as torch.distributions.Categorical computes it: -sum p * clamp(log p, finfo.min)."""
    import torch

    logp = logits.float() - logits.float().logsumexp(-1, keepdim=True)
    return -(logp.clamp(min=torch.finfo(logp.dtype).min) * logp.exp()).sum(-1)


def entropy_bounded_fill(entropy: torch.Tensor, active: torch.Tensor, gamma: float) -> torch.Tensor:
    """(B, L) bool: the k lowest-entropy active positions, k the largest with sum - max of their entropies <= gamma
    (at least one per row with an active position)."""
    import torch

    h = torch.where(active, entropy.float(), torch.inf)
    srt = h.sort(dim=-1, stable=True).values
    finite = torch.where(srt.isfinite(), srt, 0.0)
    spread = finite.cumsum(-1) - finite.cummax(-1).values  # nondecreasing: the bound holds on a prefix
    k = ((spread <= gamma) & srt.isfinite()).sum(-1, keepdim=True).clamp(min=1)
    return (sort_rank(h) < k) & active


@dataclass
class EBSamplerConfig(StrategyConfig):
    """EB-Sampler's knob: `gamma`, the entropy budget (0.01: PC-Sampler's eval default for it; the paper sweeps
    1e-3 to 1). No step schedule: one step per position at most."""

    name: str = "eb_sampler"
    threshold: float | None = None
    gamma: float = 0.01
    steps_per_block: int = 1024
    cap_at_block: bool = True

    def validate(self) -> None:
        super().validate()
        self._threshold_unused("gamma is its rule")
        _require(_is_num(self.gamma) and self.gamma >= 0, "gamma", f"must be a number >= 0 (nats), got {self.gamma!r}")

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        tokens, _ = step_tokens(x, self)
        fill = entropy_bounded_fill(categorical_entropy(x.logits), x.block == x.mask_id, self.gamma)
        return fill_out(x, tokens, fill)
