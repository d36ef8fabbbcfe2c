"""The masked family's rule interface: what a decoding rule sees and returns, and the calls the engine makes.

diffusers' scheduler split is the model: the rule owns the sampling rule, the engine only loops (rows, cache,
forwards, the one host read, timing). A rule is a sampler config dataclass (`samplers.masked.MaskedSamplerConfig` or
a subclass) with these entry points, the only ones the engine calls (`harness.engine.masked`):

    resolved(schedule, confidence) -> rule                    the model's defaults for the rule's null knobs
    plan(size, max_new_tokens, block_length, seeded) -> BlockPlan   set_timesteps: a block's steps and shares
    step(MaskedStepIn) -> MaskedStepOut                       one step after the forward, pure tensors, no host read
    block_end(BlockProgress) -> (final, capped)               check_block_should_continue for one row
    stops_at_commit(RowTokens) / stops_at_block_end(RowTokens)   where EOS ends a row (check_eos_finished)

Opt-ins the engine reads: a row's carry may hold `canvas_end` (an int or a one-element tensor,
positions of the block; -1: the layout's canvas), and the row's next forward then runs on the canvas cut there
(SlowFast's later fast-phase forwards; the logits past the cut hold no real position); a rule class with
`carry_across_blocks = True` keeps a row's carry into its next block (`MaskedStepIn.first` says a block starts)
and gets the logits past the block in `MaskedStepIn.ahead` where the layout computes them (KLASS's one
probability history for the whole canvas); a rule whose `shadow_queries` is true gets (B, 2L, V) logits, the block's
then its shadow's (WINO's verify queries: the block's positions again as masks, query i seeing the block but i),
and the decoder refuses a layout that cannot run them.

A block here is what the rule fills: the decode block, or one of its sub-blocks where the model's layout has them
(`models.loading.masked_checks.DecodeLayout.windows`: Fast-dLLM v2 fills a 32-token block as sub-blocks of 8, left
to right, the forward still running the whole block). The inputs are the rule's own types, never the engine's row
state, so `samplers` imports nothing of `harness`. torch is imported lazily by the rules (configs validate before
any model loads).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class BlockPlan:
    """A block's schedule (set_timesteps for one row), made by the rule's `plan` and handed back at each step:
    its fill steps and each step's share, either fixed (`shares`, the even schedule: step s takes
    shares[min(s, len - 1)]) or a fraction of the masks left (`ratios`, Dream's schedule: floor(masks_left *
    ratios[min(s, len - 1)]) in float32). A rule with another schedule subclasses it."""

    steps: int
    shares: list[int] = field(default_factory=list)
    seeded: bool = False  # the block's first token is the model's AR prediction, committed alone at its first forward
    ratios: list[float] = field(default_factory=list)


@dataclass
class MaskedStepIn:
    """One step of the busy rows, each in its own block at its own step. Shapes: B rows, L block positions, V vocab.
    Per-row host values are lists (the engine knows them; a rule makes the tensors it needs).

    `carry` holds each row's own memory between the steps of a block (None at a block's first forward): a rule
    that compares with the previous step (KLASS, SlowFast, WINO) keeps what it needs there; others ignore it."""

    logits: torch.Tensor  # (B, L, V) the block's logits (already shifted for a model that predicts the next token)
    block: torch.Tensor  # (B, L) long: tokens in place, mask_id where masked
    editable: torch.Tensor  # (B, L) bool: answer positions of the block (not the prompt's tail, not filler)
    plans: list[BlockPlan]  # each row's plan for its block (from `plan`)
    step: list[int]  # fill steps taken in the block (forwards with masks before them; a seeded first one not counted)
    first: list[bool]  # the block's first forward (a seeded plan commits its first token alone there)
    keys: torch.Tensor  # (3, B) long: sample seed, block index, forward in the block (samplers.streams keys)
    mask_id: int
    carry: list[dict[str, Any] | None] = field(default_factory=list)  # per row; None at a block's first forward
    # the logits of the canvas's positions after each row's block (B, A, V), for a rule with `carry_across_blocks`
    # where the layout runs the whole answer (`canvas: answer`, recompute); None elsewhere. Columns past a row's
    # canvas (or after a shorter last block) hold no real position
    ahead: torch.Tensor | None = None


@dataclass
class MaskedStepOut:
    """The rule's answer: the next block and what changed, per position."""

    block: torch.Tensor  # (B, L) long
    filled: torch.Tensor  # (B, L) bool: masked positions given a token this step
    edited: torch.Tensor  # (B, L) bool: committed tokens replaced this step
    remasked: torch.Tensor  # (B, L) bool: committed tokens turned back into masks this step
    carry: list[dict[str, Any] | None] = field(default_factory=list)  # per row, handed back at the next step


@dataclass
class BlockProgress:
    """Where one row's block stands after a forward (the input of `block_end`)."""

    had_masks: bool  # the block held a mask before this forward
    masks_left: bool  # it holds one after
    edited: bool  # this forward replaced a committed token
    step: int  # fill steps taken (forwards with masks before them)
    steps: int  # the plan's fill steps
    post: int  # forwards after the block's last mask, this one included
    carry: dict[str, Any] | None = None  # the rule's carry after this forward (a rule whose end is its own: SlowFast)


@dataclass
class RowTokens:
    """One row's tokens after a step (the input of the EOS rule): its sequence is `prefix + block`."""

    prefix: list[int]  # everything before the current decode block, the prompt included
    block: list[int]  # the decode block as it stands
    changed: list[bool]  # per block position: filled or edited this step (empty at a block's end)
    answer_start: int  # the prompt's length
    eos_ids: Container[int]
    mask_id: int
