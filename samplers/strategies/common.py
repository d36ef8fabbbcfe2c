"""What the strategies share: rank and top-k selection over a block's positions, per row, with each row's own k
(ties go to the lower position, as `torch.argmax` and a stable sort break them), a row's carry, a token's
probability."""

from __future__ import annotations

from typing import TYPE_CHECKING

from samplers.masked import _require
from samplers.masked_rule import BlockProgress

if TYPE_CHECKING:
    import torch


def rank_of(score: torch.Tensor, descending: bool = True) -> torch.Tensor:
    """(B, L) each position's rank within its row (0: the best; `descending`: the highest score is the best)."""
    import torch

    order = score.argsort(dim=-1, descending=descending, stable=True)
    pos = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, pos)


def top_k(score: torch.Tensor, k: torch.Tensor, eligible: torch.Tensor, largest: bool = True) -> torch.Tensor:
    """(B, L) bool: each row's k[row] best eligible positions (highest, or lowest with `largest=False`); fewer
    when fewer are eligible."""
    import math

    import torch

    hidden = -math.inf if largest else math.inf
    rank = rank_of(torch.where(eligible, score, torch.full_like(score, hidden)), descending=largest)
    return eligible & (rank < k[:, None])


def row_carry(carry: list, n: int) -> list:
    """Each row's carry from the last step (None at a block's first forward, or for all rows when none is given)."""
    return carry if carry else [None] * n


def prob_of(logits: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """The float64 softmax probability of `tok` at each position (the authors' `F.softmax(logits.to(float64))`)."""
    import torch

    return torch.softmax(logits.double(), dim=-1).gather(-1, tok[..., None])[..., 0]


def uniforms(cfg, x) -> torch.Tensor | None:
    """The step's counter-based uniforms (`samplers.streams`, keyed by seed, block, forward) when it samples."""
    if cfg.temperature == 0:
        return None
    from samplers import streams

    return streams.uniforms(x.keys[0], x.keys[1], x.keys[2], x.block.shape[1])


def check_own_rule(cfg) -> None:
    """What every strategy needs of the base knobs: a threshold of its own, and none of the block_refinement rule's
    re-masking or editing (the strategy's step decides what changes)."""
    _require(cfg.threshold is not None, "threshold", f"must be a number in [0, 1] for {cfg.name}")
    _require(cfg.remask_ratio == 0, "remask_ratio", f"must be 0 for {cfg.name} (its step owns what it re-masks)")
    _require(cfg.editing_threshold is None, "editing_threshold", f"must be null for {cfg.name}")


def filled_or_capped(progress: BlockProgress) -> tuple[bool, bool]:
    """(final, capped): the block holds no mask, or it took the plan's steps (capped when masks are left)."""
    capped = progress.step >= progress.steps
    return capped or not progress.masks_left, capped and progress.masks_left


def steps_taken(x) -> torch.Tensor:
    """(B,) long: the fill steps each row took in its block (`MaskedStepIn.step`, a list or a tensor)."""
    import torch

    return torch.as_tensor(x.step, dtype=torch.long, device=x.block.device)


def shares_of(cfg, x) -> torch.Tensor:
    """(B,) long: this step's share per row from its plan (the even schedule's entry at the step, clamped at the
    last)."""
    import torch

    at = zip(x.plans, x.step, strict=True)
    return torch.tensor([p.shares[min(s, len(p.shares) - 1)] if p.shares else 0 for p, s in at], device=x.block.device)


def refuse_seeded(cfg, seeded: bool) -> None:
    """An AR-seeded block commits its first token alone at its first forward: none of the strategies does that."""
    _require(not seeded, "name", f"{cfg.name} does not seed a block's first token (an AR-seeded model's layout)")
