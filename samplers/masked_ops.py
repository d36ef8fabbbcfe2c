"""The masked rule's tensor operations (`samplers.masked`'s configs compose them in their `step`): the even and
Dream schedules, the draw, the ranking, the fill / edit rule and ReMDM re-masking. torch is imported lazily, so the
configs validate before it loads."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from samplers.ranking import sort_rank

if TYPE_CHECKING:
    import torch


class DrawKnobs(Protocol):
    """What the draw reads of a sampler config (`samplers.masked.MaskedSamplerConfig` has them): typed here so this
    module needs nothing of the configs that compose it."""

    temperature: float
    top_k: int | None
    top_p: float | None


DREAM_EPS = 1e-3  # Dream's DreamGenerationConfig default `eps` (its generation_config.json sets none)


def transfer_schedule(block_length: int, steps: int) -> list[int]:
    """Tokens to fill at each step: the block split evenly, the remainder to the first steps (diffusers)."""
    base, rem = divmod(block_length, steps)
    return [base + (i < rem) for i in range(steps)]


def dream_ratios(steps: int) -> list[float]:
    """Dream's `diffusion_generate` schedule as each step's fraction of the masks left: `1 - s / t` in float32 (its
    tensors' dtype) with t, s = timesteps[step], timesteps[step + 1] of linspace(1, DREAM_EPS, steps + 1); 1 at the
    last step (every mask left). Its count, `int(masks_left * (1 - s / t))`, is the floor of the float32 product."""
    import torch

    ts = torch.linspace(1, DREAM_EPS, steps + 1)
    return [*(1 - ts[1:-1] / ts[:-2]).tolist(), 1.0]


def confidence_of(logits: torch.Tensor, cfg: DrawKnobs, prob: torch.Tensor, kind: str) -> torch.Tensor:
    """(B, L) what ranks the masked positions: `prob` the drawn token's probability (as `draw` returns it), `margin`
    top-1 minus top-2 probability, `entropy` minus the entropy (Dream's sample_tokens: sum p log(p + 1e-10)), both of
    the distribution the token was drawn from (temperature, top-k, top-p applied when temperature > 0)."""
    import torch

    if kind == "prob":
        return prob
    x = logits if cfg.temperature == 0 else filtered_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    probs = torch.softmax(x.float(), dim=-1)
    if kind == "margin":
        top = probs.topk(2, dim=-1).values
        return top[..., 0] - top[..., 1]
    return (probs * torch.log(probs + 1e-10)).sum(-1)


def filtered_logits(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Temperature, then top-k, then top-p; filtered entries set to the dtype's minimum (as diffusers)."""
    import torch

    x = logits / temperature if temperature != 1.0 else logits
    low = torch.finfo(x.dtype).min
    if top_k is not None and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, low)
    if top_p is not None and top_p < 1.0:
        srt, idx = torch.sort(x, descending=True, dim=-1)
        cum = torch.softmax(srt, dim=-1).cumsum(-1)
        drop = torch.zeros_like(cum, dtype=torch.bool)
        drop[..., 1:] = cum[..., :-1] > top_p  # keep the token that crosses top_p
        x = x.scatter(-1, idx, srt.masked_fill(drop, low))
    return x


def draw(logits: torch.Tensor, cfg: DrawKnobs, u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, probabilities of those tokens), each (B, L). Greedy when temperature is 0; else the token whose
    CDF interval holds the uniform `u` (B, L) under the filtered distribution (inverse-CDF sampling)."""
    import torch

    if cfg.temperature == 0:
        probs = torch.softmax(logits.float(), dim=-1)
        tok = logits.argmax(-1)
        return tok, probs.gather(-1, tok[..., None])[..., 0]
    probs = torch.softmax(filtered_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p).float(), dim=-1)
    cdf = probs.double().cumsum(-1)
    target = (u.double() * cdf[..., -1])[..., None]
    tok = torch.searchsorted(cdf, target, right=True)[..., 0].clamp(max=probs.shape[-1] - 1)
    # a zero-probability token can only be hit at a tie of the CDF: step back to the last token with mass
    tok = torch.where(probs.gather(-1, tok[..., None])[..., 0] > 0, tok, probs.argmax(-1))
    return tok, probs.gather(-1, tok[..., None])[..., 0]


def refine(
    block: torch.Tensor,
    tokens: torch.Tensor,
    probs: torch.Tensor,
    n_fill: torch.Tensor,
    editable: torch.Tensor,
    mask_id: int,
    threshold: float | None,
    editing_threshold: float | None,
    rank_by: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One refinement step for rows at their own steps: (new block, filled (B, L), edited (B, L)). Editing, on
    when `editing_threshold` is not None, replaces committed tokens predicted otherwise with probability > it.

    `n_fill` (B,) is each row's share this step; a row fills every masked position with probability > threshold
    when at least its share are, else its share's most confident masked ones (ranked by `rank_by`, default the
    probability). `editable` (B, L) marks the positions editing may replace (the block's non-prompt positions)."""
    import torch

    active = block == mask_id
    hidden = torch.full_like(probs, -math.inf, dtype=torch.float32)
    high = torch.where(active, probs.float(), hidden) > (math.inf if threshold is None else threshold)
    conf = torch.where(active, (probs if rank_by is None else rank_by).float(), hidden)
    k = torch.minimum(n_fill, active.sum(-1))
    rank = sort_rank(conf, descending=True)
    use_high = high.sum(-1) >= n_fill
    fill = torch.where(use_high[:, None], high, rank < k[:, None]) & active
    edit = torch.zeros_like(fill)
    if editing_threshold is not None:  # the caller passes None when its sampler's editing is off
        edit = editable & ~active & (probs.float() > editing_threshold) & (tokens != block)
    return torch.where(fill | edit, tokens, block), fill, edit


def remask(
    block: torch.Tensor,
    logits: torch.Tensor,
    committed: torch.Tensor,
    ratio: float,
    mask_id: int,
) -> torch.Tensor:
    """ReMDM-style: re-mask the floor(ratio * n) least confident of each row's `committed` positions (B, L), the
    confidence being the current logits' probability of the token in place."""
    import torch

    if ratio <= 0:
        return block
    p = torch.softmax(logits.float(), dim=-1).gather(-1, block.clamp(max=logits.shape[-1] - 1)[..., None])[..., 0]
    n = torch.floor(committed.sum(-1).float() * ratio).long()
    conf = p.masked_fill(~committed, math.inf)
    return block.masked_fill(committed & (sort_rank(conf) < n[:, None]), mask_id)
