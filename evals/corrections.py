"""Self-correction, measured: committed tokens that a later step changed, and whether the change helped.

A diffusion decoder commits tokens before its canvas is final: the uniform-state sampler *accepts* positions
(keeps their sampled token in the next input) and may re-noise them a step later; a masked sampler *fills*
positions and may edit (`editing_threshold`) or re-mask (`remask_ratio`) them. A change of a committed token is
the decoder correcting itself, or breaking what was right. Pure functions over a stored `trajectory`
(`sampler.capture_trajectory=true`, contract/records.py), no torch, so every family's rows compare:

- an entry's *committed* tokens: `tokens[p]` for each `p` in `accepted` (uniform: the kept sampled token; masked:
  the filled, not masked, positions). The last entry of each canvas also commits its `argmax` canvas at every
  position (what the canvas finally holds; a masked block's `argmax` is its tokens, `mask_id` where still masked,
  which commits nothing).
- Per output position (`offset` + canvas position; `offset` defaults to canvas x canvas length), the last committed
  token is kept; a committed token that differs from it is one **change**. With the right token per output
  position (`right`, where the eval knows it: Sudoku cells), a change from a wrong token to the right one is a
  **repair**, from the right one to a wrong one a **break** (wrong to another wrong: neither).

AR decoding (and AR + draft: accepted drafts are final) never changes a committed token: its rows have no
trajectory and get None, not zero, so a table does not pass off "not measured" as "none".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SAMPLE_KEYS = ("corr_changed", "corr_repairs", "corr_breaks")


def committed_events(trajectory: Sequence[Mapping[str, Any]]) -> list[list[tuple[int, int]]]:
    """Per trajectory entry, the (output position, token) pairs it commits, in order (see the module doc)."""
    out: list[list[tuple[int, int]]] = []
    for i, e in enumerate(trajectory):
        argmax = list(e["argmax"])
        tokens = list(e.get("tokens") or argmax)
        offset = e.get("offset", e["canvas"] * len(argmax))
        events = [(offset + p, tokens[p]) for p in e.get("accepted") or []]
        last = i + 1 == len(trajectory) or trajectory[i + 1]["canvas"] != e["canvas"]
        if last:
            mask = e.get("mask_id")
            events += [(offset + p, t) for p, t in enumerate(argmax) if t != mask]
        out.append([(p, t) for p, t in events if p >= 0])  # a masked first block may start inside the prompt
    return out


def count_corrections(trajectory: Sequence[Mapping[str, Any]], right: Sequence[int] | None = None) -> dict[str, int]:
    """`changed`, and with `right` (the right token per output position) `repairs` and `breaks`, of one sample.
    Positions past `right`'s end (or all, without it) count as changes only."""
    last: dict[int, int] = {}
    changed = repairs = breaks = 0
    for events in committed_events(trajectory):
        for pos, tok in events:
            old = last.get(pos)
            last[pos] = tok
            if old is None or old == tok:
                continue
            changed += 1
            if right is not None and pos < len(right):
                repairs += int(old != right[pos] and tok == right[pos])
                breaks += int(old == right[pos] and tok != right[pos])
    out = {"changed": changed}
    if right is not None:
        out |= {"repairs": repairs, "breaks": breaks}
    return out


def sample_corrections(trajectory: Sequence[Mapping[str, Any]] | None, right: Sequence[int] | None) -> dict[str, Any]:
    """The `corr_*` fields of one stored row: None for rows without a trajectory (not measured)."""
    if not trajectory:
        return dict.fromkeys(SAMPLE_KEYS)
    c = count_corrections(trajectory, right)
    return {"corr_changed": c["changed"], "corr_repairs": c.get("repairs"), "corr_breaks": c.get("breaks")}


def run_corrections(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Run figures over the rows that measured it: `committed_changed` / `repairs` / `breaks` (totals),
    `changed_per_sample`, `repairs_per_sample`, `breaks_per_sample`, `changed_sample_rate` (share of samples with any
    change) and `renoised_per_step` (re-noised or re-masked positions per forward, where the decoder counts them);
    `{}` when no row has a trajectory."""
    measured = [r for r in rows if r.get("corr_changed") is not None]
    out: dict[str, Any] = {}
    if measured:
        n = len(measured)
        changed = sum(r["corr_changed"] for r in measured)
        out |= {"committed_changed": changed, "changed_per_sample": changed / n}
        out["changed_sample_rate"] = sum(r["corr_changed"] > 0 for r in measured) / n
        scored = [r for r in measured if r.get("corr_repairs") is not None]
        if scored:
            rep, brk = sum(r["corr_repairs"] for r in scored), sum(r["corr_breaks"] for r in scored)
            out |= {"repairs": rep, "breaks": brk}
            out |= {"repairs_per_sample": rep / len(scored), "breaks_per_sample": brk / len(scored)}
    return out | renoised_per_step(rows)


def renoised_per_step(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Re-noised (uniform: positions not accepted) or re-masked (masked) positions per forward, over the rows whose
    decoder records them per step (`renoised_per_step`); `{}` for runs without (AR)."""
    counted = [r for r in rows if r.get("renoised_per_step")]
    nfe = sum(r.get("nfe", 0) for r in counted)
    if not nfe:
        return {}
    return {"renoised_per_step": sum(s for r in counted for c in r["renoised_per_step"] for s in c) / nfe}
