"""Samplers of the masked (absorbing-state) family: which masked positions of a block to fill each step.

Noise is an explicit mask token; a filled position stays filled unless the rule edits it (`editing_threshold`)
or re-masks it (`remask_ratio`). One rule, `refine`, covers the family; the configs below only set its knobs:

- `block_refinement`: diffusers' `BlockRefinementScheduler` (LLaDA 2.x): fill the masked positions whose
  confidence > `threshold`, or, when fewer than this step's share of the block are that confident, the share's
  most confident ones; optionally replace committed tokens whose new prediction is confident (> `editing_threshold`)
  and different, for up to `max_post_steps` forwards after the block's last mask.
- `low_confidence`: LLaDA's fixed-steps rule (no threshold): the share's most confident positions each step.
- `fast_dllm_masked`: Fast-dLLM's parallel decoding: every position with confidence > `threshold`, at least one.
- `remdm`: the LLaDA rule plus ReMDM-style re-masking of the `remask_ratio` least confident committed tokens.

A step's share follows `schedule` (null: the model's own, `model.schedule`): `even`, the block split evenly over
`min(steps_per_block, max_new_tokens // minimal_topk)` steps (diffusers; LLaDA's get_num_transfer_tokens), or
`dream`, Dream's `diffusion_generate` rule (`int(masks_left * (1 - s / t))` with t, s on linspace(1, eps, steps + 1),
all that are left at the last step). Which masked positions take the share is ranked by `confidence` (null: the
model's own): `prob` (the drawn token's probability: diffusers, LLaDA, Dream's maskgit_plus), `margin` (top-1 minus
top-2 probability: Dream's topk_margin) or `entropy` (minus the entropy: Dream's entropy); `threshold` always reads
the probability. Tokens are the argmax (`temperature` 0) or drawn from the temperature / top-k / top-p distribution by
inverse CDF with the counter-based uniforms of `samplers.streams` (batch-invariant). Validation runs in
`__post_init__`, before any model loads, and names the key. torch is imported lazily for that reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from samplers.config import SamplerConfigError

if TYPE_CHECKING:
    import torch

FAMILY = "masked"
SCHEDULES = ("even", "dream")
CONFIDENCES = ("prob", "margin", "entropy")
DREAM_EPS = 1e-3  # Dream's DreamGenerationConfig default `eps` (its generation_config.json sets none)


def _require(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise SamplerConfigError(f"sampler.{key}: {msg}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass
class MaskedSamplerConfig:
    """Knobs of the masked block loop. Defaults: diffusers' `BlockRefinementScheduler` defaults, greedy."""

    name: str = "block_refinement"
    steps_per_block: int = 32  # refinement steps per block (the fill schedule); null-free: always an integer
    threshold: float | None = 0.95  # fill every masked position with confidence > this (null: the schedule only)
    minimal_topk: int = 1  # steps are capped at max_new_tokens // minimal_topk (as LLaDA2Pipeline)
    editing_threshold: float | None = None  # > 0: replace committed tokens predicted otherwise with confidence > this
    max_post_steps: int = 16  # editing forwards allowed after the block's last mask
    remask_ratio: float = 0.0  # re-mask this fraction of the block's least confident committed tokens (ReMDM)
    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    eos_early_stop: bool = True  # a row stops once an EOS is committed with no mask before it
    block_length: int | None = None  # null: the model's block length
    family: str = FAMILY  # tells the config checks this sampler is for masked models
    cap_at_block: bool = False  # steps <= block length (see steps_for)
    capture_trajectory: bool = False  # record each step's block and filled positions (evals.corrections, films)
    schedule: str | None = None  # even | dream; null: the model's own (model.schedule)
    confidence: str | None = None  # prob | margin | entropy: what ranks the share; null: the model's own

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _require(self.family == FAMILY, "family", f"must be {FAMILY!r} for a masked sampler, got {self.family!r}")
        _require(
            _is_int(self.steps_per_block) and self.steps_per_block > 0,
            "steps_per_block",
            f"must be an integer > 0, got {self.steps_per_block!r}",
        )
        _require(
            self.threshold is None or (_is_num(self.threshold) and 0.0 <= self.threshold <= 1.0),
            "threshold",
            f"must be null or in [0, 1], got {self.threshold!r}",
        )
        _require(
            _is_int(self.minimal_topk) and self.minimal_topk > 0,
            "minimal_topk",
            f"must be an integer > 0, got {self.minimal_topk!r}",
        )
        _require(
            self.editing_threshold is None or (_is_num(self.editing_threshold) and 0.0 < self.editing_threshold <= 1),
            "editing_threshold",
            f"must be null (off) or in (0, 1], got {self.editing_threshold!r}",
        )
        _require(
            _is_int(self.max_post_steps) and self.max_post_steps >= 0,
            "max_post_steps",
            f"must be an integer >= 0, got {self.max_post_steps!r}",
        )
        for key, allowed in (("schedule", SCHEDULES), ("confidence", CONFIDENCES)):
            value = getattr(self, key)
            _require(value is None or value in allowed, key, f"must be null or one of {allowed}, got {value!r}")
        self._validate_draw()

    def _validate_draw(self) -> None:
        _require(
            _is_num(self.remask_ratio) and 0.0 <= self.remask_ratio < 1.0,
            "remask_ratio",
            f"must be in [0, 1), got {self.remask_ratio!r}",
        )
        _require(
            _is_num(self.temperature) and self.temperature >= 0,
            "temperature",
            f"must be >= 0, got {self.temperature!r}",
        )
        _require(
            self.top_k is None or (_is_int(self.top_k) and self.top_k > 0),
            "top_k",
            f"must be null or an integer > 0, got {self.top_k!r}",
        )
        _require(
            self.top_p is None or (_is_num(self.top_p) and 0.0 < self.top_p <= 1.0),
            "top_p",
            f"must be null or in (0, 1], got {self.top_p!r}",
        )
        for key in ("eos_early_stop", "capture_trajectory"):
            _require(isinstance(getattr(self, key), bool), key, f"must be a bool, got {getattr(self, key)!r}")
        _require(
            self.block_length is None or (_is_int(self.block_length) and self.block_length > 0),
            "block_length",
            f"must be null or an integer > 0, got {self.block_length!r}",
        )

    @property
    def editing(self) -> bool:
        return self.editing_threshold is not None and self.editing_threshold > 0

    def steps_for(self, max_new_tokens: int, block_length: int) -> int:
        """Refinement steps per block for a request (LLaDA2Pipeline: min(steps, gen_length // minimal_topk)); with
        `cap_at_block` at most the block length, so every step fills at least one position (diffusers' rule, which
        block_refinement keeps exactly, lets steps past the block length fill only what passes the threshold)."""
        steps = max(1, min(self.steps_per_block, max_new_tokens // self.minimal_topk))
        return min(steps, block_length) if self.cap_at_block else steps

    def knobs(self) -> dict:
        return asdict(self)


@dataclass
class BlockRefinementConfig(MaskedSamplerConfig):
    """diffusers' BlockRefinementScheduler / LLaDA 2.x (threshold + schedule, optional editing)."""

    name: str = "block_refinement"


@dataclass
class LowConfidenceConfig(MaskedSamplerConfig):
    """LLaDA's low-confidence remasking: a fixed number of steps per block, the most confident share each step."""

    name: str = "low_confidence"
    threshold: float | None = None
    cap_at_block: bool = True


@dataclass
class FastDllmConfig(MaskedSamplerConfig):
    """Fast-dLLM's threshold rule: every position with confidence > threshold, at least the most confident one
    (one step per block position, so a one-token share per step)."""

    name: str = "fast_dllm_masked"
    threshold: float | None = 0.9
    steps_per_block: int = 1024
    cap_at_block: bool = True


@dataclass
class ReMDMConfig(MaskedSamplerConfig):
    """The fixed-steps rule with ReMDM-style re-masking of the least confident committed tokens."""

    name: str = "remdm"
    threshold: float | None = None
    remask_ratio: float = 0.25
    cap_at_block: bool = True

    def validate(self) -> None:
        super().validate()
        _require(self.remask_ratio > 0, "remask_ratio", f"must be > 0 for remdm, got {self.remask_ratio!r}")


MASKED_SAMPLERS = {c.name: c for c in (BlockRefinementConfig, LowConfidenceConfig, FastDllmConfig, ReMDMConfig)}


# --------------------------------------------------------------------------------------------------
# the rule (torch)


def transfer_schedule(block_length: int, steps: int) -> list[int]:
    """Tokens to fill at each step: the block split evenly, the remainder to the first steps (diffusers)."""
    base, rem = divmod(block_length, steps)
    return [base + (i < rem) for i in range(steps)]


def dream_share(masks_left: int, step: int, steps: int) -> int:
    """Dream's `diffusion_generate` count for step `step` of `steps`: `int(masks_left * (1 - s / t))` in float32
    (its tensors' dtype) with t, s = timesteps[step], timesteps[step + 1] of linspace(1, DREAM_EPS, steps + 1); every
    mask left at the last step."""
    import torch

    if step >= steps - 1:
        return masks_left
    ts = torch.linspace(1, DREAM_EPS, steps + 1)
    return int(torch.tensor(float(masks_left)) * (1 - ts[step + 1] / ts[step]))


def confidence_of(logits: torch.Tensor, cfg: MaskedSamplerConfig, prob: torch.Tensor, kind: str) -> torch.Tensor:
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


def draw(logits: torch.Tensor, cfg: MaskedSamplerConfig, u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
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
    """One refinement step for rows at their own steps: (new block, filled (B, L), edited (B, L)).

    `n_fill` (B,) is each row's share this step; a row fills every masked position with probability > threshold
    when at least its share are, else its share's most confident masked ones (ranked by `rank_by`, default the
    probability). `editable` (B, L) marks the positions editing may replace (the block's non-prompt positions)."""
    import torch

    active = block == mask_id
    hidden = torch.full_like(probs, -math.inf, dtype=torch.float32)
    high = torch.where(active, probs.float(), hidden) > (math.inf if threshold is None else threshold)
    conf = torch.where(active, (probs if rank_by is None else rank_by).float(), hidden)
    k = torch.minimum(n_fill, active.sum(-1))
    order = conf.argsort(dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(
        -1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order)
    )
    use_high = high.sum(-1) >= n_fill
    fill = torch.where(use_high[:, None], high, rank < k[:, None]) & active
    edit = torch.zeros_like(fill)
    if editing_threshold is not None and editing_threshold > 0:
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
    order = conf.argsort(dim=-1, stable=True)
    rank = torch.empty_like(order).scatter_(
        -1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order)
    )
    return block.masked_fill(committed & (rank < n[:, None]), mask_id)
