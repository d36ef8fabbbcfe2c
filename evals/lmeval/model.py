"""lm-eval's `LM` over our `Decoder`: generative tasks decoded by our loop, every sample logged and resumable.

lm-eval builds the prompts and scores the replies; we decode. Each request gets the same seed rule and the
same per-sample record as our own evals (`sample_seed(run seed, "<task>/<doc_id>")`, GenerationResult rows
appended to the run's ResultStore as they finish), so TPF/NFE per sample and resume work for lm-eval tasks
too. Thought blocks are removed from the text handed back to lm-eval (its extractors would otherwise match
choices quoted in the reasoning); the raw reply stays in the row.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from contract.decoding import decode_and_store
from contract.records import GenerationRequest, changed_items, item_sha, stale_inputs_error
from contract.scoring import LikelihoodConfig
from contract.text import sample_seed
from evals.diagnostics import sample_diagnostics
from evals.lmeval.thoughts import opens_thought, split_thoughts

UNSUPPORTED = "not implemented (perplexity tasks); use loglikelihood or generate_until tasks"


@register_model("dgharness")
class DecoderLM(LM):
    """Wraps a `contract.decoding.Decoder` and a `contract.decoding.Store` for `lm_eval.simple_evaluate`.

    `chat`: each context becomes one user message rendered by the checkpoint's chat template (thinking on/off
    from the model config), rather than lm-eval rendering the template itself; few-shot examples then sit
    inside that one user turn. `max_gen_toks` applies when a task sets none.
    """

    def __init__(
        self,
        decoder,
        store,
        seed: int = 0,
        batch_size: int = 1,
        chat: bool = True,
        max_gen_toks: int = 256,
        extra_stop: list[str] | None = None,
        progress: bool = True,
        likelihood: LikelihoodConfig | None = None,
    ):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.decoder, self.store, self.seed, self.batch_size = decoder, store, seed, batch_size
        self.chat, self.max_gen_toks, self.extra_stop, self.progress = (
            chat,
            max_gen_toks,
            list(extra_stop or []),
            progress,
        )
        self.rows: dict[str, dict[str, Any]] = {}  # sample_id -> row, for everything this LM answered
        self.likelihood, self._scorer = likelihood or LikelihoodConfig(), None

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Each (context, continuation) scored by the family's scorer (`models.likelihood.scorer_for`, issue 47):
        AR exact, masked Monte-Carlo ELBO, uniform-state decision read; rows logged and resumed as generation's."""
        from evals.lmeval.likelihood import score_and_store

        bar = tqdm(
            total=len(requests), desc=f"loglikelihood [{self.scorer.method}]", disable=disable_tqdm or not self.progress
        )
        rows = score_and_store(self, self.scorer, requests, bar.update)
        bar.close()
        for row in rows:
            self.rows[row["sample_id"]] = row
        return [(row["logprob"], bool(row["is_greedy"])) for row in rows]

    @property
    def scorer(self):
        """The family's likelihood scorer, built on first use (generation-only runs never build one)."""
        if self._scorer is None:
            from models.likelihood import scorer_for

            self._scorer = scorer_for(self.decoder, self.likelihood)
        return self._scorer

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"loglikelihood_rolling is {UNSUPPORTED}")

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        done = self.store.load()
        todo, ids = [], []
        seen: dict[tuple[str, int], int] = {}
        shas: dict[str, str] = {}
        for inst in requests:
            key = (inst.task_name, inst.doc_id)
            k = seen[key] = seen.get(key, -1) + 1  # repeats of one doc get their own id and seed
            sid = f"{inst.task_name}/{inst.doc_id}" + (f"/{k}" if k else "")
            ids.append(sid)
            shas[sid] = item_sha(sid, inst.args[0], inst.args[1])
            if sid not in done:
                todo.append((sid, inst))
        if changed := changed_items(done, shas):  # e.g. a reordered data file: other questions under old ids
            raise stale_inputs_error(changed)
        todo.sort(key=lambda t: -len(t[1].args[0]))  # similar lengths together: less padding per batch
        bar = tqdm(
            total=len(requests),
            initial=len(requests) - len(todo),
            desc=f"lm-eval [{self.decoder.label}]",
            unit="sample",
            disable=disable_tqdm or not self.progress,
        )
        prepared = {sid: (inst, *self._request(sid, inst)) for sid, inst in todo}

        def make_row(res) -> dict[str, Any]:
            inst, req, opened = prepared[res.sample_id]
            return {
                "item_sha": shas[res.sample_id],
                **res.to_dict(),
                **sample_diagnostics(res),
                **self._reply(res, req.stop_strings, opened),
                "task": inst.task_name,
                "doc_id": inst.doc_id,
                "context": inst.args[0],
            }

        reqs = [req for _, req, _ in prepared.values()]
        for row in decode_and_store(
            self.decoder, reqs, self.batch_size, make_row, self.store.append, resumed=bool(done)
        ):
            inst = prepared[row["sample_id"]][0]
            done[row["sample_id"]] = row
            self.cache_hook.add_partial("generate_until", inst.args, row["reply"])
            bar.update(1)
        bar.close()
        for sid in ids:
            self.rows[sid] = done[sid]
        return [done[sid]["reply"] for sid in ids]

    def _request(self, sid: str, inst) -> tuple[GenerationRequest, bool]:
        context, gen_kwargs = inst.args
        gen_kwargs = dict(gen_kwargs or {})
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_toks = int(gen_kwargs.get("max_gen_toks") or self.max_gen_toks)
        prompt = [{"role": "user", "content": context}] if self.chat else context
        ids = self.decoder.encode(prompt)
        tail = self.decoder.tokenizer.decode(ids[-32:], skip_special_tokens=False)
        req = GenerationRequest(
            sample_id=sid,
            prompt_ids=ids,
            seed=sample_seed(self.seed, sid),
            max_new_tokens=max_toks,
            stop_strings=until + self.extra_stop,
        )
        return req, opens_thought(tail)

    def _reply(self, res, stop_strings: list[str], starts_in_thought: bool) -> dict[str, Any]:
        """The text lm-eval scores: thoughts removed, special tokens dropped, cut at the first stop string, and
        otherwise as lm-eval's own model classes hand it to the filters (HFLM / vLLM: decoded, split at the stop
        sequences, never stripped; see `split_thoughts` for why a trailing space matters).

        Decoded with special tokens kept, because thought tags may be special tokens that `res.text` lost.
        """
        tok = self.decoder.tokenizer
        raw = tok.decode(res.token_ids, skip_special_tokens=False)
        split = split_thoughts(raw, starts_in_thought)
        reply = split.answer
        for special in sorted(set(tok.all_special_tokens), key=len, reverse=True):
            reply = reply.replace(special, "")
        cuts = [reply.find(s) for s in stop_strings if s and s in reply]
        reply = reply[: min(cuts)] if cuts else reply
        return {
            "raw_text": raw,
            "reply": reply,
            "has_thought": split.has_thought,
            "unclosed_thought": split.unclosed,
            "thought_chars": len(split.thought),
        }

    def get_model_info(self) -> dict[str, Any]:
        return {"dgharness": self.decoder.describe()}
