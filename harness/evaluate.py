"""The generic eval loop: items -> prompts -> decoder batches -> scored rows in the store -> metrics."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

from harness.records import GenerationRequest, decode_metrics
from models.base import sample_seed


def run_items(ev, decoder, store, batch_size: int, seed: int) -> dict[str, Any]:
    """Decode every item not yet in `store`, append each scored sample, and return eval + decode metrics.

    Each request carries a seed derived from (run seed, sample id), so results do not depend on the
    batch size, the batch neighbours, or which samples a resumed run still had to do.
    """
    items = ev.items()
    ids = [it.sample_id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"eval {ev.name!r} yields duplicate sample ids; they are the resume key")
    done = store.load()
    todo = [it for it in items if it.sample_id not in done]
    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=f"{ev.name} [{decoder.label}]", unit="sample")
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        requests = [
            GenerationRequest(
                sample_id=it.sample_id,
                prompt_ids=decoder.encode(it.prompt),
                seed=sample_seed(seed, it.sample_id),
                max_new_tokens=ev.max_new_tokens,
                stop_strings=ev.stop_strings,
            )
            for it in batch
        ]
        t0 = time.perf_counter()
        results = decoder.generate(requests)
        share = (time.perf_counter() - t0) / len(batch)
        for it, res in zip(batch, results, strict=True):
            res.wall_time_s = share  # amortised: per-sample shares sum to the decode wall time
            row = {**res.to_dict(), "meta": it.meta, **ev.score(it, res.text)}
            store.append(row)
            done[it.sample_id] = row
        bar.update(len(batch))
        bar.set_postfix(tpf=f"{sum(r['num_tokens'] for r in done.values()) / max(1, sum(r['nfe'] for r in done.values())):.2f}")
    bar.close()
    rows = [done[i] for i in ids]
    return {**decode_metrics(rows), **ev.summarize(rows)}
