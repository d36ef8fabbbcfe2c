"""The masked family's rule interface: what a decoding rule sees and returns, and the calls the engine makes.

diffusers' scheduler split is the model: the rule owns the sampling rule, the engine only loops (rows, cache,
forwards, the one host read, timing). A rule is a sampler config dataclass (`samplers.masked.MaskedSamplerConfig` or
a subclass) with these entry points:

    plan(masks, max_new_tokens, block_length) -> BlockPlan        set_timesteps: a block's steps and shares
    step(MaskedStepIn) -> MaskedStepOut                           one step after the forward, pure tensors, no host read
    block_end(BlockProgress) -> (final, capped)                   check_block_should_continue for one row
    stops_at_commit / stops_at_block_end                          where EOS ends a row (check_eos_finished)

The inputs are the rule's own types, never the engine's row state, so `samplers` imports nothing of `harness`.
torch is imported lazily by the rules (configs validate before any model loads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class BlockPlan:
    """A block's schedule (set_timesteps for one row): its fill steps and each step's share (empty: the rule works
    the share out step by step, e.g. Dream's schedule from the masks left)."""

    steps: int
    shares: list[int] = field(default_factory=list)


@dataclass
class MaskedStepIn:
    """One step of the busy rows, each in its own block at its own step. Shapes: B rows, L block positions, V vocab.

    `carry` holds each row's own memory between the steps of a block (None at a block's first forward): a rule
    that compares with the previous step (KLASS, SlowFast, WINO) keeps what it needs there; others ignore it."""

    logits: torch.Tensor  # (B, L, V) the block's logits (already shifted for a model that predicts the next token)
    block: torch.Tensor  # (B, L) long: tokens in place, mask_id where masked
    editable: torch.Tensor  # (B, L) bool: answer positions of the block (not the prompt's tail, not filler)
    step: torch.Tensor  # (B,) long: fill steps taken in this block (0 at its first forward)
    steps: torch.Tensor  # (B,) long: the plan's fill steps
    share: torch.Tensor  # (B,) long: this step's share from the plan
    keys: torch.Tensor  # (3, B) long: sample seed, block index, forward in the block (samplers.streams keys)
    first: torch.Tensor  # (B,) bool: the block's first forward (an AR-seeded block commits its first token alone)
    mask_id: int
    carry: list[dict[str, Any] | None] = field(default_factory=list)  # per row; None at a block's first forward


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
