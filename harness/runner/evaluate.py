"""The generic eval loop: items -> prompts -> the decoder's stream -> scored rows in the store -> metrics."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from contract.decoding import decode_and_store
from contract.records import (
    GenerationRequest,
    changed_items,
    decode_metrics,
    item_sha,
    items_sha,
    stale_inputs_error,
)
from contract.text import encode_prompt, sample_seed
from evals.corrections import run_corrections, sample_corrections
from evals.decode_order import run_decode_order, sample_decode_order
from evals.diagnostics import run_diagnostics, sample_diagnostics


def checked_items(ev) -> list:
    """The eval's items, refused when there are none or their ids (the resume key) repeat: both would give
    a run with no or wrong numbers rather than an error. Called before any model loads."""
    items = ev.items()
    if not items:
        raise ValueError(f"eval {ev.name!r} yields no items (an empty data file, or a filter that keeps nothing)")
    ids = [it.sample_id for it in items]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise ValueError(f"eval {ev.name!r} yields duplicate sample ids (e.g. {dup}); they are the resume key")
    return items


def requests_for(ev, decoder, items: list, seed: int) -> list[GenerationRequest]:
    """The run's requests for `items`: each seeded from (run seed, sample id), so a re-decode of an item (a
    resume, or `harness.runner.batch_check` at batch 1) asks for exactly the same sample."""
    return [
        GenerationRequest(
            sample_id=it.sample_id,
            prompt_ids=decoder.encode(it.prompt),
            seed=sample_seed(seed, it.sample_id),
            max_new_tokens=ev.max_new_tokens,
            stop_strings=ev.stop_strings,
        )
        for it in items
    ]


def run_items(ev, decoder, store, batch_size: int, seed: int, items: list | None = None) -> dict[str, Any]:
    """Decode every item not yet in `store`, append each scored sample as it finishes, return the metrics.

    Each request carries a seed derived from (run seed, sample id), so its random numbers do not depend on the
    batch size, the batch neighbours, or which samples a resumed run still had to do (batch-shaped rounding can
    still move tokens at real shapes: `harness.runner.batch_check` measures it).
    """
    items = checked_items(ev) if items is None else items
    ids = [it.sample_id for it in items]
    shas = item_shas(items)
    done = store.load()
    if changed := changed_items(done, shas):
        raise stale_inputs_error(changed)
    todo = {it.sample_id: it for it in items if it.sample_id not in done}
    requests = requests_for(ev, decoder, list(todo.values()), seed)

    def make_row(res) -> dict[str, Any]:
        it = todo[res.sample_id]
        row = {**res.to_dict(), "item_sha": shas[it.sample_id], "meta": it.meta, **ev.score(it, res.text)}
        right = right_tokens(ev, decoder, it) if res.trajectory else None
        order = sample_decode_order(res.trajectory, row["num_tokens"])  # parallel or secretly left to right
        return {**row, **sample_diagnostics(row), **sample_corrections(res.trajectory, right), **order}

    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=f"{ev.name} [{decoder.label}]", unit="sample")
    tokens = sum(r["num_tokens"] for r in done.values())
    nfe = sum(r["nfe"] for r in done.values())
    for row in decode_and_store(decoder, requests, batch_size, make_row, store.append, resumed=bool(done)):
        done[row["sample_id"]] = row
        tokens, nfe = tokens + row["num_tokens"], nfe + row["nfe"]
        bar.update(1)
        bar.set_postfix(tpf=f"{tokens / max(1, nfe):.2f}")
    bar.close()
    return items_metrics(ev, [done[i] for i in ids], shas)


def right_tokens(ev, decoder, item) -> list[int] | None:
    """The right token per output position, where the eval knows it (`Eval.position_target`: Sudoku's compact
    answer), in the decoder's tokens; None otherwise."""
    text = ev.position_target(item)
    tok = getattr(decoder, "tokenizer", None)
    return None if text is None or tok is None else encode_prompt(tok, text)


def items_metrics(ev, rows: list[dict[str, Any]], shas: dict[str, str]) -> dict[str, Any]:
    """A run's metrics from its stored rows (in item order) and its items' hashes: decode figures, diagnostics, the
    eval's own scores and the item-set hash. Only the rows count, so a sharded run's merged rows give the same."""
    return {
        **decode_metrics(rows),
        **run_diagnostics(rows),
        **run_corrections(rows),
        **run_decode_order(rows),
        **ev.summarize(rows),
        "items_sha": items_sha(list(shas.values())),
    }


def item_shas(items: list) -> dict[str, str]:
    """What each sample is made from, by sample id (stored with it, compared on resume)."""
    return {it.sample_id: item_sha(it.sample_id, it.prompt, it.target) for it in items}
