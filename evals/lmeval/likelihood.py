"""lm-eval's `loglikelihood` requests scored by our family scorers, logged per request and resumable.

Each (context, continuation) pair is tokenized as lm-eval's `TemplateLM` does for a causal model (trailing spaces of
the context move to the continuation; the pair is encoded whole and split at the context's length; an empty context
becomes the prefix token), or, with `chat`, the context as one user message through the chat template and the
continuation encoded after it. Sample id `<task>/<doc_id>/ll<idx>` (idx: lm-eval's choice index); the random seed
is `sample_seed(run seed, "<task>/<doc_id>")`, shared by a question's choices (common random numbers: the choices
of one question are compared under the same masks), and each request's row (estimate, Monte-Carlo standard error,
forwards) is appended to the run's store as soon as it is scored, so a resumed run scores only what is missing.
"""

from __future__ import annotations

import time
from typing import Any

from contract.records import changed_items, item_sha, stale_inputs_error
from contract.scoring import LikelihoodRequest
from contract.text import sample_seed


def tok_encode(tokenizer, text: str, add_special_tokens: bool | None = None) -> list[int]:
    """HFLM's `tok_encode` with `add_bos_token` unset: the tokenizer's own specials, none where the text already
    starts with the BOS string."""
    if add_special_tokens is None:
        bos = tokenizer.bos_token
        add_special_tokens = not (bos and text.startswith(bos))
    return tokenizer.encode(text, add_special_tokens=add_special_tokens)


def prefix_token_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as lm-eval's `TemplateLM.loglikelihood` builds them for a causal model."""
    if context == "":
        cont = tok_encode(tokenizer, continuation, add_special_tokens=False)
        prefix = prefix_token_id(tokenizer)
        return ([prefix], cont) if prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tok_encode(tokenizer, context + continuation)
    ctx = tok_encode(tokenizer, context)
    return ctx, whole[len(ctx) :]


def encode_chat_pair(decoder, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """The context as one user message through the chat template, the continuation's tokens after it."""
    ids = decoder.encode([{"role": "user", "content": context}])
    return ids, decoder.tokenizer.encode(continuation, add_special_tokens=False)


def sample_ids(requests) -> list[str]:
    """`<task>/<doc_id>/ll<idx>`; a repeat of the same request gets `/r<k>` (its own row)."""
    seen: dict[tuple[str, int, int], int] = {}
    out = []
    for inst in requests:
        key = (inst.task_name, inst.doc_id, inst.idx)
        k = seen[key] = seen.get(key, -1) + 1
        out.append(f"{inst.task_name}/{inst.doc_id}/ll{inst.idx}" + (f"/r{k}" if k else ""))
    return out


def score_and_store(lm, scorer, requests, progress) -> list[dict[str, Any]]:
    """Rows for every request (stored ones reused, the rest scored in batches and appended as they finish)."""
    done = lm.store.load()
    sids = sample_ids(requests)
    shas, todo = {}, []
    for sid, inst in zip(sids, requests, strict=True):
        shas[sid] = item_sha(sid, *inst.args)
        if sid not in done:
            todo.append((sid, inst))
    if changed := changed_items(done, shas):
        raise stale_inputs_error(changed)
    reqs = []
    for sid, inst in todo:
        pair = encode_chat_pair(lm.decoder, *inst.args) if lm.chat else encode_pair(lm.decoder.tokenizer, *inst.args)
        doc_key = f"{inst.task_name}/{inst.doc_id}"
        reqs.append((inst, LikelihoodRequest(sid, pair[0], pair[1], sample_seed(lm.seed, doc_key))))
    reqs.sort(key=lambda t: -len(t[1].context_ids) - len(t[1].continuation_ids))  # similar lengths together
    step = max(1, scorer.cfg.batch_size)
    for lo in range(0, len(reqs), step):
        chunk = reqs[lo : lo + step]
        t0 = time.perf_counter()
        results = scorer.score([r for _, r in chunk])
        wall = (time.perf_counter() - t0) / len(chunk)
        for (inst, req), res in zip(chunk, results, strict=True):
            row = {
                "item_sha": shas[req.sample_id], "request": "loglikelihood", "task": inst.task_name,
                "doc_id": inst.doc_id, "choice": inst.idx, "context_tokens": len(req.context_ids),
                "request_seed": req.seed, "wall_time_s": wall, **res.to_dict(),
            }  # fmt: skip
            lm.store.append(row)
            done[req.sample_id] = row
            progress(1)
    return [done[sid] for sid in sids]
