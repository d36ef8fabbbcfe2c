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

import logging
import time
from typing import Any

from contract.records import changed_items, item_sha, items_sha, stale_inputs_error
from contract.scoring import USED_KNOBS, LikelihoodRequest
from contract.text import sample_seed

log = logging.getLogger(__name__)


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
                "num_tokens": 0, "nfe": res.forwards,  # the store's row contract: no token generated, forwards run
            }  # fmt: skip
            lm.store.append(row)
            done[req.sample_id] = row
            progress(1)
    return [done[sid] for sid in sids]


def doc_row(task: str, doc_id: int, rows: list[dict[str, Any]], scored: dict[str, Any], metric: str, filt: str):
    """One row per question of a likelihood task: its choices' records, the chosen index, lm-eval's verdict."""
    rows = sorted(rows, key=lambda r: r["choice"])
    logprobs = [r["logprob"] for r in rows]
    main = scored["filters"].get(filt, {})
    keep = ("choice", "logprob", "stderr", "is_greedy", "tokens", "forwards", "mc_num", "wall_time_s")
    return {
        "sample_id": f"{task}/{doc_id}",
        "task": task,
        "doc_id": doc_id,
        "request": "loglikelihood",
        "method": rows[0]["method"],
        "item_sha": items_sha([r["item_sha"] for r in rows]),
        "choices": [{k: r.get(k) for k in keep} for r in rows],
        "answer": max(range(len(logprobs)), key=logprobs.__getitem__),
        "forwards": sum(r["forwards"] for r in rows),
        "wall_time_s": sum(r["wall_time_s"] for r in rows),
        "target": scored["target"],
        "lm_eval": {f: {k: v for k, v in m.items() if k != "answer"} for f, m in scored["filters"].items()},
        "main_metric": f"{metric},{filt}",
        "correct": float(main.get(metric, 0.0)),
        "no_answer": False,
        "format_ok": True,
    }


def likelihood_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Run figures of the likelihood rows: requests, forwards, Monte-Carlo standard errors, requests per second."""
    choices = [c for r in rows for c in r["choices"]]
    errs = [c["stderr"] for c in choices if c.get("stderr") is not None]
    wall = sum(c["wall_time_s"] for c in choices)
    return {
        "likelihood_requests": len(choices),
        "likelihood_forwards": sum(c["forwards"] for c in choices),
        "likelihood_mean_stderr": sum(errs) / len(errs) if errs else None,
        "likelihood_max_stderr": max(errs) if errs else None,
        "likelihood_wall_time_s": wall,
        "likelihood_requests_per_second": len(choices) / wall if wall else 0.0,
    }


def scoring_report(lm, rows: list[dict[str, Any]], sampler_used: bool) -> dict[str, Any]:
    """What scoring used, logged and recorded: the method and its knobs, the `eval.likelihood` knobs it ignored, and
    whether any request reached the sampler (only generate_until requests do)."""
    desc = lm.scorer.describe()
    unused = sorted(set(lm.likelihood.as_dict()) - set(USED_KNOBS[lm.scorer.method]))
    log.info(
        "likelihood scoring: %s; eval.likelihood knobs unused by it: %s; sampler knobs %s",
        desc, unused, "used by generate_until requests" if sampler_used else "unused (no request reached the sampler)",
    )  # fmt: skip
    report = {"likelihood": desc, "likelihood_knobs_unused": unused, "sampler_used": sampler_used}
    return {**report, **likelihood_metrics(rows)}
