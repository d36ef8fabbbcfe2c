"""PC-Sampler (Huang et al. 2025, arXiv 2508.13021, "Position-aware calibration of decoding bias in masked
diffusion models"), as its `generate_with_pc_sampler` / `pc_sampler_function` do it (NEUIR/PC-Sampler@8b106b0,
src/generate.py).

LLaDA's fixed-steps loop (each block's masks split evenly over its steps, `get_num_transfer_tokens`; blocks from
the prompt's end, the whole answer on the canvas) with another ranking: a masked position's score is
exp(-`lambd` * i) * min(`alpha`, -p * log(f(t) + 1e-9)), i its index in the block, t the drawn token, p its
probability (softmax of the logits), f(t) the token's frequency in a background corpus (`baseline`: its JSON,
`{"num_token": N, "p_baseline_dict": {id: count}}`, f = count / N, 1 / N for an id it lacks); the share's
highest-scoring masked positions are filled (torch.topk: the order of exact ties is unspecified there, the lower
position first here). Its defaults: lambd 0.25, alpha 10, its data/baseline/reference_corpus.json (LLaDA's
vocabulary; not shipped here: set `baseline` to it), steps = answer length (one token per step), one block.
`baseline: null` uses a uniform background (f = 1 / vocab: the calibration term is then p * log(vocab)), a choice of
ours for models without a corpus file. No EOS stop in its loop (the engine's EOS stop returns the same answer up to
that EOS); temperature > 0: its Gumbel-max draw (global RNG) samples what our draw samples, not the same tokens.

On the uniform-state rule (DiffusionGemma): its ranking could order `confidence_topk`'s kept set, but its
calibration needs a background corpus over the model's vocabulary and its position decay a left-to-right block with
masks; not ported there.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from samplers.masked import _is_num, _require
from samplers.ranking import sort_rank
from samplers.strategies.base import StrategyConfig, fill_out, step_tokens

if TYPE_CHECKING:
    import torch

    from samplers.masked_rule import MaskedStepIn, MaskedStepOut


@functools.lru_cache(maxsize=4)
def background(path: str | None, vocab: int) -> torch.Tensor:
    """(max(vocab, ids + 1),) float32 token frequencies from a PC-Sampler baseline JSON (uniform when path is None)."""
    import torch

    if path is None:
        return torch.full((vocab,), 1.0 / vocab)
    with open(path) as f:
        data = json.load(f)
    n, counts = data["num_token"], {int(k): v for k, v in data["p_baseline_dict"].items()}
    freq = torch.full((max(vocab, max(counts, default=0) + 1),), 1.0 / n)
    freq[torch.tensor(list(counts), dtype=torch.long)] = torch.tensor([c / n for c in counts.values()])
    return freq


def pc_scores(prob: torch.Tensor, tokens: torch.Tensor, freq: torch.Tensor, lambd: float, alpha: float) -> torch.Tensor:
    """(B, L) exp(-lambd * i) * min(alpha, -p log(f(t) + 1e-9)), i the position in the block."""
    import torch

    calibrated = (-prob.float() * torch.log(freq[tokens] + 1e-9)).clamp(max=alpha)
    i = torch.arange(prob.shape[-1], device=prob.device, dtype=torch.float32)
    return torch.exp(-lambd * i) * calibrated


def top_share(score: torch.Tensor, active: torch.Tensor, share: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: each row's `share` highest-scoring active positions (the lower position first at a tie)."""
    import torch

    return (sort_rank(torch.where(active, score, -torch.inf), descending=True) < share[:, None]) & active


@dataclass
class PCSamplerConfig(StrategyConfig):
    """PC-Sampler's defaults: its scripts/eval.py (lambd 0.25, alpha 10, one token per step, greedy)."""

    name: str = "pc_sampler"
    threshold: float | None = None
    lambd: float = 0.25
    alpha: float = 10.0
    baseline: str | None = None  # its data/baseline/reference_corpus.json (LLaDA vocabulary); null: uniform
    steps_per_block: int = 1024
    cap_at_block: bool = True

    def validate(self) -> None:
        super().validate()
        self._threshold_unused("a fixed share per step")
        _require(_is_num(self.lambd) and self.lambd >= 0, "lambd", f"must be a number >= 0, got {self.lambd!r}")
        _require(_is_num(self.alpha) and self.alpha > 0, "alpha", f"must be a number > 0, got {self.alpha!r}")
        _require(
            self.baseline is None or (isinstance(self.baseline, str) and os.path.isfile(self.baseline)),
            "baseline",
            f"must be null or an existing PC-Sampler baseline JSON file, got {self.baseline!r}",
        )

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        tokens, prob = step_tokens(x, self)
        freq = background(self.baseline, x.logits.shape[-1]).to(x.logits.device)
        score = pc_scores(prob, tokens, freq, self.lambd, self.alpha)
        return fill_out(x, tokens, top_share(score, x.block == x.mask_id, self.shares(x)))
