"""Run a masked rule (`samplers.masked_rule`: plan / step / block_end) over a model the way LLaDA's generate lays a
decode out (the whole answer on the canvas, blocks from the prompt's end, every position seeing every other), rows
in one `step` call each at its own block and step. `harness.strategies_check.llada` runs this loop against the
authors' generate functions until the engine (harness.engine.masked) makes the same calls.

Two layouts beyond the plain canvas, as the authors' code runs them: `shadow` (WINO) appends a copy of the current
block as mask tokens at the block's positions, which nothing but itself attends and whose query i sees the real
block except position i; the rule gets (B, 2L, V) logits, the shadow's second. A rule's carry may ask for a canvas
cut at `canvas_end` positions of the block (SlowFast's fast phase): the forward then runs prompt + answer up to
there; positions past it get zero logits. A rule with `carry_across_blocks` (KLASS) keeps a row's carry into its
next block and gets the logits of the canvas after the block (`MaskedStepIn.ahead`), as the engine gives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from samplers.masked_rule import BlockProgress, MaskedStepIn


@dataclass
class Row:
    x: list[int]
    prompt: int
    gen: int
    width: int
    block: int = 0
    carry: dict | None = None
    step: int = 0
    post: int = 0
    forwards: int = 0
    total: int = 0
    plan: object = None
    done: bool = False
    remasked: int = 0  # tokens re-masked (WINO's narrow out)
    cut: int = 0  # forwards on a canvas cut at `canvas_end` (SlowFast's fast phase)
    trace: list = field(default_factory=list)  # each forward's input ids (the shadow block included)

    @property
    def lo(self) -> int:
        return self.prompt + self.block * self.width


def logits_of(row: Row, model, mask_id: int, shadow: bool, canvas_end: int = -1, ahead: bool = False) -> torch.Tensor:
    """The block's logits (L, V), or the block's and its shadow's (2L, V), from one forward; `ahead`: the block's
    and the canvas's after it (L + A, V)."""
    x, lo, width = row.x, row.lo, row.width
    ids = torch.tensor([x])
    if canvas_end >= 0:
        ids = ids[:, : lo + canvas_end]
    t = ids.shape[1]
    pos = torch.arange(t)
    seen = torch.ones(t, t, dtype=torch.bool)
    if shadow:
        ids = torch.cat([ids, torch.full((1, width), mask_id, dtype=torch.long)], dim=1)
        pos = torch.cat([pos, torch.arange(lo, lo + width)])
        seen = torch.ones(t + width, t + width, dtype=torch.bool)
        seen[:, t:] = False  # nothing attends the shadow ...
        seen[t:, t:] = True  # ... but itself
        seen[t:, lo : lo + width] = ~torch.eye(width, dtype=torch.bool)  # query i: the real block but position i
    row.trace.append(ids[0].tolist())
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(seen.shape, dtype=dtype).masked_fill(~seen, torch.finfo(dtype).min)[None, None]
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos[None]).logits[0]
    block = out[lo : lo + width]
    if block.shape[0] < width:  # a cut canvas: the rule reads no position past it
        block = torch.cat([block, block.new_zeros(width - block.shape[0], block.shape[1])])
    if ahead:
        return out[lo:]
    return torch.cat([block, out[t:]]) if shadow else block


def decode(
    rule, model, prompts: list[list[int]], gen: int, width: int, mask_id: int, shadow: bool = False
) -> list[Row]:
    """Every row decoded by `rule`, all busy rows in each step call: each row's canvas (`x`), forwards (`total`)
    and each forward's input (`trace`)."""
    rows = [Row(list(p) + [mask_id] * gen, len(p), gen, width) for p in prompts]
    for r in rows:
        r.plan = rule.plan(width, gen, width)
    while busy := [r for r in rows if not r.done]:
        _step(rule, model, busy, mask_id, shadow)
    return rows


def step_input(logits, block, editable, plans, step, first, keys, mask_id, carry, ahead=None) -> MaskedStepIn:
    """A `MaskedStepIn` in the form `samplers.masked_rule` defines: per-row plans and host lists, or (main before the
    engine refactor) the steps and shares as tensors."""
    names = {f.name for f in fields(MaskedStepIn)}
    if "plans" in names:
        return MaskedStepIn(logits, block, editable, plans, step, first, keys, mask_id, carry, ahead)
    share = [p.shares[min(s, len(p.shares) - 1)] if p.shares else 0 for p, s in zip(plans, step, strict=True)]
    return MaskedStepIn(
        logits, block, editable, torch.tensor(step), torch.tensor([p.steps for p in plans]), torch.tensor(share),
        keys, torch.tensor(first), mask_id, carry,
    )  # fmt: skip


def _step(rule, model, rows: list[Row], mask_id: int, shadow: bool) -> None:
    ends = [int(r.carry["canvas_end"]) if r.carry and "canvas_end" in r.carry else -1 for r in rows]
    across = rule.carry_across_blocks
    outs = [logits_of(r, model, mask_id, shadow, e, across) for r, e in zip(rows, ends, strict=True)]
    cols = max(len(o) for o in outs)
    logits = torch.stack([torch.cat([o, o.new_zeros(cols - len(o), o.shape[1])]) for o in outs])
    width = rows[0].width
    logits, ahead = (logits[:, :width], logits[:, width:]) if across else (logits, None)
    block = torch.tensor([r.x[r.lo : r.lo + r.width] for r in rows])
    keys = torch.tensor([[0] * len(rows), [r.block for r in rows], [r.forwards for r in rows]])
    editable = torch.ones_like(block, dtype=torch.bool)
    first = [r.forwards == 0 for r in rows]
    x = step_input(logits, block, editable, [r.plan for r in rows], [r.step for r in rows], first, keys, mask_id,
                   [r.carry for r in rows], ahead)  # fmt: skip
    out = rule.step(x)
    for i, r in enumerate(rows):
        had = mask_id in r.x[r.lo : r.lo + r.width]
        r.x[r.lo : r.lo + r.width] = out.block[i].tolist()
        r.carry, r.forwards, r.total = out.carry[i], r.forwards + 1, r.total + 1
        r.remasked, r.cut = r.remasked + int(out.remasked[i].sum()), r.cut + (ends[i] >= 0)
        r.step += had
        r.post += not had
        left = mask_id in r.x[r.lo : r.lo + r.width]
        progress = BlockProgress(had, left, bool(out.edited[i].any()), r.step, r.plan.steps, r.post, r.carry)
        final, _ = rule.block_end(progress)
        if final:
            r.block, r.step, r.post, r.forwards = r.block + 1, 0, 0, 0
            r.carry = r.carry if across else None
            r.done = r.lo >= r.prompt + r.gen
