"""What batching costs a run: a subset of its items decoded again at batch 1, compared with the run's samples.

A sample's random numbers do not depend on its batch (`samplers.streams`), but its logits do: batch-shaped kernels
(matmuls, grouped experts, attention over padded contexts) round differently, and a sampler turns any rounding
difference into another draw somewhere. At the released model's shapes that moves tokens even on the CPU
(docs/reproducibility.md), so a run at batch B does not give batch 1's samples, and this check measures by how much
on the run's own items: token agreement, exact-match share and the paired quality difference (run minus batch 1).

`batch_check.samples` (0: off; the `experiment=report_*` presets turn it on) items, spread evenly over the eval's
item order, are re-decoded with the same requests (seeds from (run seed, sample id)). Their rows go to
`batch_check.jsonl` in the run dir, never to samples.jsonl; a re-run reuses the rows there whose item is unchanged,
so a resumed or repeated run decodes each checked item at batch 1 once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from contract.decoding import SelfDrivingEval
from contract.files import jsonl_objects
from contract.records import item_sha
from harness.runner.evaluate import requests_for
from harness.runner.store import BATCH_CHECK, append_line


@dataclass(frozen=True)
class BatchCheckConfig:
    samples: int = 0  # items re-decoded at batch 1 after the run; 0 turns the check off

    @classmethod
    def from_config(cls, node: Any, ev: Any) -> BatchCheckConfig:
        """The `batch_check` node, checked before any model loads; errors name the key."""
        node = node or {}
        unknown = sorted(set(node) - {"samples"})
        if unknown:
            raise ValueError(f"batch_check.{unknown[0]}: unknown key (batch_check takes only `samples`)")
        n = node.get("samples", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"batch_check.samples: must be an integer >= 0 (0: off), got {n!r}")
        return cls(samples=n)


def subset(items: list, n: int) -> list:
    """`n` items spread evenly over the item order (all of them when there are no more than `n`)."""
    if n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def token_agreement(a: list[int], b: list[int]) -> tuple[int, int]:
    """(equal positions, compared positions): position by position over the longer of the two outputs."""
    return sum(x == y for x, y in zip(a, b)), max(len(a), len(b))


def _stored(run_dir, shas: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Earlier batch-1 rows of this run dir whose item is unchanged (a line torn by a crash mid-append is skipped)."""
    path = run_dir / BATCH_CHECK
    rows: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return rows
    for _, row in jsonl_objects(path, torn_tail_ok=True):
        if shas.get(row.get("sample_id")) == row.get("item_sha"):
            rows.setdefault(row["sample_id"], row)
    return rows


def run_batch_check(
    cfg: BatchCheckConfig, ev, decoder, store, batch_size: int, seed: int, items: list, done: dict[str, dict]
) -> dict[str, Any] | None:
    """Re-decode the subset at batch 1 and compare with the run's rows `done` (by sample id); the metrics block.
    None when off; a `skipped` note when the run itself decoded at batch 1."""
    if not cfg.samples:
        return None
    if batch_size == 1:
        return {"samples": 0, "batch_size": 1, "skipped": "the run decoded at batch 1: nothing to compare"}
    if isinstance(ev, SelfDrivingEval) or items is None:  # lm-eval (GPQA) builds its requests while it runs
        return {"samples": 0, "batch_size": batch_size, "skipped": f"eval {ev.name!r} builds its own requests"}
    chosen = subset(items, cfg.samples)
    shas = {it.sample_id: item_sha(it.sample_id, it.prompt, it.target) for it in chosen}
    stored = _stored(store.run_dir, shas)
    todo = [it for it in chosen if it.sample_id not in stored]
    by_id = {it.sample_id: it for it in todo}
    t0 = time.perf_counter()
    for res in decoder.stream(requests_for(ev, decoder, todo, seed), batch_size=1):
        it = by_id[res.sample_id]
        row = {"sample_id": it.sample_id, "item_sha": shas[it.sample_id], "token_ids": res.token_ids, "nfe": res.nfe}
        row["correct"] = ev.score(it, res.text).get("correct")
        append_line(store.run_dir / BATCH_CHECK, row)
        stored[it.sample_id] = row
    return compare([done[it.sample_id] for it in chosen], [stored[it.sample_id] for it in chosen]) | {
        "batch_size": batch_size,
        "decoded_now": len(todo),
        "wall_time_s": time.perf_counter() - t0,
        "file": BATCH_CHECK,
    }


def compare(run_rows: list[dict], batch1_rows: list[dict]) -> dict[str, Any]:
    """Token agreement (equal positions over compared positions, pooled over the samples), the share of samples
    identical token for token, and the paired quality difference (mean of run minus batch 1 `correct`; None for an
    eval without a per-sample score), with the per-item figures."""
    per_item, equal, compared = [], 0, 0
    for run, one in zip(run_rows, batch1_rows):
        same, width = token_agreement(run["token_ids"], one["token_ids"])
        equal, compared = equal + same, compared + width
        per_item.append(
            {
                "sample_id": run["sample_id"],
                "identical": run["token_ids"] == one["token_ids"],
                "token_agreement": same / width if width else 1.0,
                "correct_run": run.get("correct"),
                "correct_batch1": one.get("correct"),
            }
        )
    n = len(per_item)
    scored = [p for p in per_item if p["correct_run"] is not None and p["correct_batch1"] is not None]
    quality_run = sum(p["correct_run"] for p in scored) / len(scored) if scored else None
    quality_b1 = sum(p["correct_batch1"] for p in scored) / len(scored) if scored else None
    return {
        "samples": n,
        "token_agreement": equal / compared if compared else 1.0,
        "exact_match": sum(p["identical"] for p in per_item) / n if n else 1.0,
        "quality_run": quality_run,
        "quality_batch1": quality_b1,
        "quality_delta": None if quality_run is None else quality_run - quality_b1,
        "items": per_item,
    }
