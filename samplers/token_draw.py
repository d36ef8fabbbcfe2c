"""Token draws for AR and speculative decoding, from counter-based streams (`samplers.streams`).

A sampled token at absolute position p of a sample uses the uniform `hash(seed, 0, p, TOKEN)` and an inverse-CDF
draw, so AR outputs do not depend on the batch or its neighbours (to float tolerance), as the diffusion
decoder's do. Speculative acceptance is the standard rule (Leviathan et al. 2023; Chen et al. 2023): draft
token d with target probability p(d) and draft probability q(d) is kept when u < p(d) / q(d); at the first
rejection the token is drawn from norm(max(p - q, 0)); when every draft is kept the bonus token is drawn from
p. The output distribution is the target's. Greedy verification keeps the longest prefix equal to the target's
argmax plus the target's next argmax (lossless: the output is greedy AR's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from samplers import streams


@dataclass(frozen=True)
class TokenSampling:
    """How a target token is chosen: greedy, or sampled with transformers' temperature -> top-k -> top-p order."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


def probabilities(logits: torch.Tensor, cfg: TokenSampling) -> torch.Tensor:
    """(..., V) float32 sampling distribution after temperature, top-k and top-p (at least one token kept)."""
    x = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = x.topk(cfg.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_x, order = x.sort(dim=-1)  # ascending, as transformers' TopPLogitsWarper
        cum = sorted_x.softmax(-1).cumsum(-1)
        drop = cum <= 1 - cfg.top_p
        drop[..., -1] = False
        x = x.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return x.softmax(-1)


def uniforms_at(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """(b, n) float64 uniforms keyed by (seed of each row, absolute position, stream)."""
    b, n = positions.shape
    flat = streams.uniforms(
        seeds.repeat_interleave(n), torch.zeros_like(positions).flatten(), positions.flatten(), 1, stream
    )
    return flat.view(b, n)


def draw_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: (..., V) distributions (not necessarily normalised) and (...) uniforms -> token ids."""
    cdf = probs.double().cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[..., -1]).unsqueeze(-1)).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


def pick(logits: torch.Tensor, cfg: TokenSampling, seeds: torch.Tensor, positions: torch.Tensor, stream: int):
    """(b, n, V) logits -> (b, n) tokens: argmax, or a draw keyed by each token's absolute position."""
    if not cfg.do_sample:
        return logits.argmax(-1)
    return draw_from(probabilities(logits, cfg), uniforms_at(seeds, positions, stream))


def verify(
    target_logits: torch.Tensor,
    drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    num_drafts: torch.Tensor,
    cfg: TokenSampling,
    seeds: torch.Tensor,
    positions: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept each row's own prefix of its drafts.

    `target_logits` (b, k+1, V) at the verified positions (the row's last token then its k drafts); `drafts`
    (b, k); `draft_probs` (b, k, V) or None for a deterministic (argmax) drafter; `num_drafts` (b,) how many of
    the k are real for each row; `positions` (b, k+1) the absolute positions of the tokens the logits predict.
    Returns (accepted (b,), tokens (b, k+1)): the row's new tokens are `tokens[:accepted + 1]`.
    """
    b, k = drafts.shape
    real = torch.arange(k, device=drafts.device)[None, :] < num_drafts[:, None]
    if not cfg.do_sample:
        best = target_logits.argmax(-1)
        keep = (drafts == best[:, :k]) & real
        accepted = keep.long().cumprod(-1).sum(-1)
        return accepted, best  # kept drafts equal the argmax, and the argmax at `accepted` is the bonus
    p = probabilities(target_logits, cfg)
    p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)
    q_d = torch.ones_like(p_d) if draft_probs is None else draft_probs.gather(-1, drafts[..., None]).squeeze(-1)
    u = uniforms_at(seeds, positions[:, :k], streams.ACCEPT)
    keep = (u * q_d < p_d) & real
    accepted = keep.long().cumprod(-1).sum(-1)
    at = accepted[:, None, None].expand(b, 1, p.shape[-1])
    p_m = p.gather(1, at).squeeze(1)
    if draft_probs is None:
        q_m = torch.zeros_like(p_m).scatter_(-1, drafts.gather(1, accepted.clamp(max=k - 1)[:, None]), 1.0)
    else:
        q_m = draft_probs.gather(1, accepted.clamp(max=k - 1)[:, None, None].expand(b, 1, p.shape[-1])).squeeze(1)
    residual = (p_m - q_m).clamp_(min=0)
    rejected = (accepted < num_drafts)[:, None]
    usable = rejected & (residual.sum(-1, keepdim=True) > 0)
    dist = torch.where(usable, residual, p_m)
    bonus_pos = positions.gather(1, accepted[:, None])
    bonus = draw_from(dist, uniforms_at(seeds, bonus_pos, streams.RESIDUAL).squeeze(1))
    tokens = torch.cat([drafts, drafts[:, :1]], dim=1).scatter_(1, accepted[:, None], bonus[:, None])
    return accepted, tokens
