"""Each entry's place in its row's stable sort: the one argsort-to-rank helper every rule uses (which k positions
to fill, keep or re-mask). torch is imported lazily: the sampler configs that use it validate before it loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def sort_rank(x: torch.Tensor, descending: bool = False) -> torch.Tensor:
    """(..., L) long: each entry's index in the stable sort of its row along the last dimension (0: first), so
    `sort_rank(x) < k` marks each row's k smallest entries (`descending`: largest), ties in position order."""
    import torch

    order = x.argsort(dim=-1, descending=descending, stable=True)
    ranks = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, ranks)
