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
- `llada2_editing`: LLaDA 2.1's own `generate` (token editing): every masked position with confidence > `threshold`,
  else the `num_to_transfer` most confident, with no step cap; committed tokens edited (> `editing_threshold`, 0:
  any changed token) for at most `max_post_steps` forwards after the block's last mask (diffusers allows one more);
  EOS checked when a block ends (diffusers freezes a row at its first committed EOS, losing later edits).

Each config is its block's whole rule (`samplers.masked_rule`: the interface's types and the calls): `plan` (the
block's steps and shares, `fill_schedule` under the `even` schedule), `step` (the draw, the ranking, `refine`, an
AR-seeded block's first token, re-masking and this step's share), `block_end` (when a block is final) and the EOS
rule (`stops_at_commit`, `stops_at_block_end`); the engine (`harness.engine.masked`) calls only these.
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
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from samplers.config import SamplerConfigError
from samplers.masked_ops import (  # noqa: F401 (filtered_logits: imported from here by tests and callers)
    confidence_of,
    draw,
    dream_ratios,
    filtered_logits,
    refine,
    remask,
    transfer_schedule,
)
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn, MaskedStepOut, RowTokens

if TYPE_CHECKING:
    import torch

FAMILY = "masked"
SCHEDULES = ("even", "dream")
CONFIDENCES = ("prob", "margin", "entropy")


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
    eos_at_block_end: ClassVar[bool] = False  # not a knob: False, a row stops at its first committed EOS (diffusers)
    # the rule's opt-ins (not knobs; samplers/masked_rule.py): its carry kept into the next block, WINO's shadow queries
    carry_across_blocks: ClassVar[bool] = False
    shadow_queries: ClassVar[bool] = False

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
        self._validate_editing()
        _require(
            _is_int(self.max_post_steps) and self.max_post_steps >= 0,
            "max_post_steps",
            f"must be an integer >= 0, got {self.max_post_steps!r}",
        )
        for key, allowed in (("schedule", SCHEDULES), ("confidence", CONFIDENCES)):
            value = getattr(self, key)
            _require(value is None or value in allowed, key, f"must be null or one of {allowed}, got {value!r}")
        self._validate_draw()

    def _validate_editing(self) -> None:
        _require(
            self.editing_threshold is None or (_is_num(self.editing_threshold) and 0.0 < self.editing_threshold <= 1),
            "editing_threshold",
            f"must be null (off) or in (0, 1], got {self.editing_threshold!r}",
        )

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

    # the block's rule (samplers.masked_rule: the engine calls only these; a subclass with another rule overrides them)

    def resolved(self, schedule: str, confidence: str) -> MaskedSamplerConfig:
        """This rule with the model's own schedule / confidence where its own are null (the layout's defaults)."""
        return replace(self, schedule=self.schedule or schedule, confidence=self.confidence or confidence)

    def plan(self, size: int, max_new_tokens: int, block_length: int, seeded: bool = False) -> BlockPlan:
        """A block of `size` positions (a block's prompt tail counts: diffusers splits the whole block): its steps
        (`steps_for`) and shares, the `even` schedule's (`fill_schedule`) or Dream's fraction of the masks left. A
        `seeded` block's first token is committed outside the schedule."""
        steps = self.steps_for(max_new_tokens, block_length)
        if (self.schedule or "even") == "even":
            return BlockPlan(steps, self.fill_schedule(size - seeded, steps), seeded)
        return BlockPlan(steps, [], seeded, dream_ratios(steps))

    def fill_schedule(self, masks: int, steps: int) -> list[int]:
        """Each step's fill share under the `even` schedule: the block's masks split over its steps (diffusers)."""
        return transfer_schedule(masks, steps)

    def step(self, inp: MaskedStepIn) -> MaskedStepOut:
        """The draw (`samplers.streams` uniforms keyed by `inp.keys`), the ranking, the fill / edit rule at this
        step's share, a seeded block's first token (the AR prediction, alone) and re-masking, never at the plan's
        last step (the block would end with masks)."""
        import torch

        from samplers import streams

        logits, block, mask = inp.logits, inp.block, inp.mask_id
        u = streams.uniforms(*inp.keys, block.shape[1]) if self.temperature > 0 else None
        tok, prob = draw(logits, self, u)
        rank = confidence_of(logits, self, prob, self.confidence or "prob")
        edit_thr = self.editing_threshold if self.editing else None
        shares = self.shares(inp)
        new, fill, edit = refine(block, tok, prob, shares, inp.editable, mask, self.threshold, edit_thr, rank)
        if any(p.seeded and f for p, f in zip(inp.plans, inp.first, strict=True)):
            fresh = torch.tensor(
                [[p.seeded and f] for p, f in zip(inp.plans, inp.first, strict=True)], device=tok.device
            )
            head = torch.zeros_like(fill)
            head[:, 0] = True
            new = torch.where(fresh, torch.where(head, tok, block), new)
            fill, edit = torch.where(fresh, head, fill), edit & ~fresh
        remasked = torch.zeros_like(fill)
        if self.remask_ratio > 0:
            last = [s + 1 >= p.steps for p, s in zip(inp.plans, inp.step, strict=True)]
            before = (block != mask) & inp.editable & ~torch.tensor(last, device=tok.device)[:, None]
            out = remask(new, logits, before, self.remask_ratio, mask)
            remasked, new = out != new, out
        return MaskedStepOut(new, fill, edit, remasked, inp.carry)

    def shares(self, inp: MaskedStepIn) -> torch.Tensor:
        """(B,) this step's fill share per row: the plan's (the even schedule's entry, clamped at its last as
        diffusers; Dream's fraction of the masks left); at least one in a seeded block under a threshold (its own
        rule always takes the most confident one); with re-masking at least the masks left over the steps left, so
        the block ends filled."""
        import torch

        dev, at = inp.block.device, list(zip(inp.plans, inp.step, strict=True))
        even = all(p.shares for p, _ in at)
        left = None if even and self.remask_ratio <= 0 else (inp.block == inp.mask_id).sum(-1)  # masks left
        if even:
            share = torch.tensor([p.shares[min(s, len(p.shares) - 1)] for p, s in at], device=dev)
        else:
            ratio = torch.tensor([p.ratios[min(s, len(p.ratios) - 1)] for p, s in at], dtype=torch.float32, device=dev)
            share = (left.float() * ratio).long()
        if self.threshold is not None and any(p.seeded for p, _ in at):
            share = torch.where(torch.tensor([p.seeded for p, _ in at], device=dev), share.clamp(min=1), share)
        if self.remask_ratio > 0:
            rest = torch.tensor([max(1, p.steps - s) for p, s in at], device=dev)
            share = torch.maximum(share, (left + rest - 1) // rest)
        return share

    def block_end(self, p: BlockProgress) -> tuple[bool, bool]:
        """(the block is final, it ended at a cap) after a forward: diffusers' `check_block_should_continue` for one
        row, less its no-op forward (editing off, block filled)."""
        if p.had_masks:
            capped = p.step >= p.steps
            return capped or (not p.masks_left and not self.editing), capped and p.masks_left
        capped = p.post > self.max_post_steps
        return capped or not p.edited, capped

    def stops_at_commit(self, row: RowTokens) -> bool:
        """diffusers' check after a step (`eos_early_stop`, unless EOS is checked at a block's end): an EOS among
        this step's commits, and the first EOS of the sequence after the prompt with no mask between the prompt
        and it."""
        if not self.eos_early_stop or self.eos_at_block_end:
            return False
        eos = row.eos_ids
        if not any(c and t in eos for c, t in zip(row.changed, row.block, strict=True)):
            return False
        full = row.prefix + row.block
        first = next(i for i, t in enumerate(full) if t in eos)
        return first >= row.answer_start and row.mask_id not in full[row.answer_start : first]

    def stops_at_block_end(self, row: RowTokens) -> bool:
        """LLaDA 2.1's check when a block is final (`eos_at_block_end`): the answer so far holds an EOS."""
        if not (self.eos_early_stop and self.eos_at_block_end):
            return False
        return any(t in row.eos_ids for t in (row.prefix + row.block)[row.answer_start :])


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


@dataclass
class LLaDA2EditingConfig(MaskedSamplerConfig):
    """LLaDA 2.1's own `generate` (its modeling file's `LLaDA2MoeModelLM.generate`), token editing. Defaults: its
    published Quality mode (threshold 0.7, editing 0.5, 16 post steps; Speed mode: threshold 0.5 and editing off or
    0.0). Its fill is not diffusers' schedule: each step fills the positions above `threshold`, else the
    `num_to_transfer` most confident, until the block has no mask (no step cap; `steps_per_block` is unused, as its
    `steps` argument is). `editing_threshold`: null turns editing off; 0 edits any changed token (its rule is `>`).
    Its generate with editing off still runs one forward after a block fills, which changes nothing: not run here."""

    name: str = "llada2_editing"
    threshold: float | None = 0.7
    editing_threshold: float | None = 0.5
    max_post_steps: int = 16
    num_to_transfer: int = 1
    eos_at_block_end: ClassVar[bool] = True  # its check: a finished block whose answer part holds an EOS

    def _validate_editing(self) -> None:
        _require(
            self.editing_threshold is None or (_is_num(self.editing_threshold) and 0.0 <= self.editing_threshold <= 1),
            "editing_threshold",
            f"must be null (off) or in [0, 1] (0: any changed token), got {self.editing_threshold!r}",
        )

    def validate(self) -> None:
        super().validate()
        _require(
            _is_int(self.num_to_transfer) and self.num_to_transfer > 0,
            "num_to_transfer",
            f"must be an integer > 0, got {self.num_to_transfer!r}",
        )

    @property
    def editing(self) -> bool:
        return self.editing_threshold is not None

    def fill_schedule(self, masks: int, steps: int) -> list[int]:
        return [self.num_to_transfer]

    def block_end(self, p: BlockProgress) -> tuple[bool, bool]:
        """Its loop: fill until no mask is left; then, editing on, forwards while they edit, at most
        `max_post_steps` of them (its counter is checked before the forward)."""
        if p.had_masks:
            return not p.masks_left and (not self.editing or self.max_post_steps == 0), False
        capped = p.post >= self.max_post_steps
        return capped or not p.edited, capped and p.edited


MASKED_SAMPLERS = {
    c.name: c for c in (BlockRefinementConfig, LowConfidenceConfig, FastDllmConfig, ReMDMConfig, LLaDA2EditingConfig)
}
