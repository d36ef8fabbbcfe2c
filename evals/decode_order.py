"""Decode order, measured: does a diffusion decoder fill its answer in parallel, or secretly left to right?

At a low temperature a confidence-ranked sampler can unmask the leftmost open position every step (Dream issue #72):
its TPF says "diffusion", its order says "autoregressive", and no score shows it. Pure functions over a stored
`trajectory` (`sampler.capture_trajectory=true`), read with `evals.corrections.committed_events`, so both diffusion
families (uniform-state accepts, masked fills) are measured alike. Per sample, over the answer's positions (output
tokens up to the cut at EOS):

- a position's **commit** is the first time it is committed;
- `order_l2r`: the share of commits at the leftmost position open when their step began (1.0: one token per step,
  left to right, as AR decodes; k tokens per step from the left give 1/k);
- `order_distance`: the mean distance in tokens of each commit from that position (0 when AR-like);
- `order_edits`: committed tokens later changed (`evals.corrections`' count).

A run is flagged `decode_order_ar_like` when its mean `order_l2r` is at least `AR_LIKE_L2R`. AR rows have no
trajectory: None (not measured), never 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evals.corrections import committed_events, count_corrections

SAMPLE_KEYS = ("order_l2r", "order_distance", "order_edits")
AR_LIKE_L2R = 0.95


def commit_order(trajectory: Sequence[Mapping[str, Any]], length: int) -> tuple[float, float] | None:
    """(share of commits at the leftmost position open at their step's start, mean distance from it) over the
    answer's positions [0, length)."""
    done: set[int] = set()
    leftmost, l2r, distance = 0, 0, 0
    for events in committed_events(trajectory):
        for pos in {p for p, _ in events if p < length and p not in done}:
            l2r += pos == leftmost
            distance += pos - leftmost
            done.add(pos)
        while leftmost in done:  # the step's commits are measured from where the step started
            leftmost += 1
    commits = len(done)
    return (l2r / commits, distance / commits) if commits else None


def sample_decode_order(trajectory: Sequence[Mapping[str, Any]] | None, length: int) -> dict[str, Any]:
    """The `order_*` fields of one stored row (None where there is no trajectory or no answer token)."""
    order = commit_order(trajectory, length) if trajectory else None
    if order is None:
        return dict.fromkeys(SAMPLE_KEYS)
    return {"order_l2r": order[0], "order_distance": order[1], "order_edits": count_corrections(trajectory)["changed"]}


def run_decode_order(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means over the measured rows and the AR-like flag; `{}` when no row was measured."""
    measured = [r for r in rows if r.get("order_l2r") is not None]
    if not measured:
        return {}
    n = len(measured)
    out = {f"mean_{k}": sum(r[k] for r in measured) / n for k in SAMPLE_KEYS}
    out["decode_order_samples"] = n
    out["decode_order_ar_like"] = out["mean_order_l2r"] >= AR_LIKE_L2R
    return out


def ar_like_note(metrics: Mapping[str, Any]) -> str:
    """The run summary line's flag: empty unless the run's decoding was effectively autoregressive."""
    if not metrics.get("decode_order_ar_like"):
        return ""
    return f" AR-LIKE decode order (l2r {metrics['mean_order_l2r']:.2f} of commits)"
