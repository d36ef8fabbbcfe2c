"""The AR engine: continuous batching for AR, AR + draft and AR + MTP on per-row KV slots (`models.slot_cache`).

    admit queued requests into free rows (prefill, in chunks) -> the first token of each
    -> every step, for every row in flight: [draft k tokens] -> one target forward over the row's last token
       (and its drafts) -> each row accepts its own prefix (+ the target's bonus token)
    -> a row whose sequence ended (EOS / stop string / length) leaves at once and its result is yielded;
       a queued request takes its row on the next step.

The same engine as the diffusion decoder's in what it measures: a finished row leaves and its slot is refilled,
one host read per step (the accepted counts and tokens), NFE = target forwards (prefill included), row
utilisation recorded, sampled tokens from counter-based streams keyed by (seed, position), so a sample's tokens
do not depend on its batch (`samplers.token_draw`). Rejected draft positions are rolled back by starting the
row's next write earlier: no K/V is copied.

Drafters: `ModelDrafter` (an ordinary smaller causal LM with its own slot cache: k greedy or sampled draft
forwards per round) and `MTPDrafter` (Gemma 4's `gemma4_assistant`: k forwards at the position of the last
token, reading the target's K/V of its store layers and the target's last hidden state, as transformers'
assisted generation hands them over).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

import torch

from contract.records import GenerationRequest, GenerationResult, check_request
from contract.text import cut_at_stop
from models.slot_cache import SlotCache
from samplers import streams
from samplers.token_draw import TokenSampling, pick, probabilities, verify

PREFILL_CHUNK = 512  # positions per prefill forward (the sliding layers' ring holds window - 1 + this)


class CausalLM:
    """A causal LM's body and head over a `SlotCache`: transformers' `*ForCausalLM` (its `.model` + `lm_head`),
    or DiffusionGemma's causal encoder + LM head (`encoder=`), the same weights decoding autoregressively."""

    def __init__(self, model, encoder=None):
        self.model = model
        inner = model.model  # *ForCausalLM: the text model; *ForConditionalGeneration: its language model
        self.body = encoder if encoder is not None else getattr(inner, "language_model", inner)
        self.text_config = model.config.get_text_config()
        self.softcap = getattr(self.text_config, "final_logit_softcapping", None)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.vocab_size = self.text_config.vocab_size
        self.embed = model.get_input_embeddings()

    def new_cache(self, rows: int, capacity: int, max_chunk: int) -> SlotCache:
        return SlotCache(self.text_config, rows, capacity, max_chunk, self.dtype, self.device)

    def forward(self, cache: SlotCache, rows: list[int] | None, starts: list[int], ids: torch.Tensor) -> torch.Tensor:
        """Run `ids` (b, n) at positions starts[i].. of rows `rows`, writing their K/V; return hidden (b, n, H)."""
        n = ids.shape[1]
        cache.begin(rows, starts, n)
        positions = torch.tensor(starts, device=self.device)[:, None] + torch.arange(n, device=self.device)
        masks = cache.masks(positions, self.dtype)
        out = self.body(input_ids=ids, attention_mask=masks, position_ids=positions, past_key_values=cache)
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.model.lm_head(hidden).float()
        return x.div_(self.softcap).tanh_().mul_(self.softcap) if self.softcap else x


@dataclass
class _Seq:
    """One request in flight: its row, its tokens, and where the target's cache stands."""

    req: GenerationRequest
    result: GenerationResult
    admitted: float
    row: int
    tokens: list[int] = field(default_factory=list)  # generated so far (the last one not yet in the target's cache)
    draft_len: int = 0  # positions the draft model has processed (ModelDrafter)
    k: int = 0  # draft tokens for the next round (adapted per row by the heuristic schedule)
    has_hidden: bool = False  # the target's hidden state at the last processed position exists (MTP can draft)

    @property
    def length(self) -> int:  # positions known (prompt + generated)
        return len(self.req.prompt_ids) + len(self.tokens)

    def last(self) -> int:
        return self.tokens[-1] if self.tokens else self.req.prompt_ids[-1]


class ModelDrafter:
    """An ordinary draft model (same vocabulary) with its own slot cache; k draft forwards per round."""

    def __init__(self, draft: CausalLM, k: int, sampling: TokenSampling):
        self.lm, self.k, self.sampling = draft, k, sampling
        self.forwards = 0

    def open(self, rows: int, capacity: int, k: int) -> None:
        self.cache = self.lm.new_cache(rows, capacity, max(PREFILL_CHUNK, k + 2))

    def admit(self, seqs: list[_Seq]) -> None:
        self.cache.reset([s.row for s in seqs])
        for s in seqs:
            s.draft_len = 0

    def draft(self, seqs: list[_Seq], b: int, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(b, k) draft tokens for rows 0..b-1 (idle rows draft dummies) and their probabilities (sampled)."""
        lm, dev = self.lm, self.lm.device
        by_row = {s.row: s for s in seqs}
        # catch the draft cache up: each row feeds what it has not processed yet (1 or 2 tokens after a round,
        # the prompt after admission, in chunks); a row with less to feed pads past its end (stale, rewritten later)
        todo = {s.row: (list(s.req.prompt_ids) + s.tokens)[s.draft_len :] for s in seqs}
        last_hidden = torch.zeros((b, 1, lm.text_config.hidden_size), dtype=lm.dtype, device=dev)
        while any(todo.values()):
            n = min(max(len(v) for v in todo.values()), PREFILL_CHUNK)
            ids = torch.zeros((b, n), dtype=torch.long)
            starts, take_at = [0] * b, [-1] * b
            for r in range(b):
                s, rest = by_row.get(r), todo.get(r, [])
                if s is None:
                    self.cache.reset([r])
                    continue
                starts[r] = s.draft_len
                if rest:
                    chunk = rest[:n]
                    ids[r, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
                    take_at[r] = len(chunk) - 1
                    s.draft_len += len(chunk)
                    todo[r] = rest[len(chunk) :]
            hidden = lm.forward(self.cache, None, starts, ids.to(dev))
            self.forwards += 1
            fed = torch.tensor([i >= 0 for i in take_at], device=dev)[:, None, None]
            idx = torch.tensor([max(i, 0) for i in take_at], device=dev)[:, None, None].expand(b, 1, hidden.shape[-1])
            last_hidden = torch.where(fed, hidden.gather(1, idx), last_hidden)
        seeds = torch.tensor([by_row[r].req.seed if r in by_row else 0 for r in range(b)], device=dev)
        pos = [by_row[r].length if r in by_row else 0 for r in range(b)]  # where the first draft token goes
        drafts, probs = [], []
        h = last_hidden
        for j in range(k):
            logits = lm.logits(h)  # (b, 1, V)
            tok = pick(logits, self.sampling, seeds, torch.tensor(pos, device=dev)[:, None] + j, streams.DRAFT)
            drafts.append(tok)
            if self.sampling.do_sample:
                probs.append(probabilities(logits, self.sampling))
            if j + 1 < k:
                for r in range(b):
                    if r not in by_row:
                        self.cache.reset([r])
                h = lm.forward(self.cache, None, [p + j for p in pos], tok)
                self.forwards += 1
                for s in seqs:
                    s.draft_len = s.length + j + 1
        self.round_k = k
        return torch.cat(drafts, 1), (torch.cat(probs, 1) if probs else None)

    def rollback(self, s: _Seq, accepted: int, before: int) -> None:
        """Draft positions past the accepted prefix are stale: the next round rewrites them (no copy)."""
        s.draft_len = min(s.draft_len, before + min(accepted, self.round_k - 1))


class MTPDrafter:
    """Gemma 4's multi-token-prediction drafter: k forwards at the last token's position over the target's K/V."""

    def __init__(self, assistant, target: CausalLM, store_layers: list[int], k: int):
        self.assistant, self.target, self.k = assistant, target, k
        types = target.text_config.layer_types
        self.store = {types[i]: i for i in store_layers}
        self.forwards = 0

    def open(self, rows: int, capacity: int, k: int) -> None:
        pass

    def admit(self, seqs: list[_Seq]) -> None:
        pass

    def draft(self, seqs, b, k, cache: SlotCache, hidden: torch.Tensor):
        """`hidden` (b, 1, H): the target's last hidden state at each row's last processed position."""
        a, t, dev = self.assistant, self.target, self.target.device
        by_row = {s.row: s for s in seqs}
        pos = [by_row[r].length - 1 if r in by_row else 0 for r in range(b)]
        last = torch.tensor([by_row[r].last() if r in by_row else 0 for r in range(b)], device=dev)[:, None]
        positions = torch.tensor(pos, device=dev)[:, None]
        rows = list(range(b))
        masks = cache.masks_for(rows, positions, t.dtype)
        shared = {}
        for layer_type, i in self.store.items():
            span = cache.span(layer_type, rows)
            shared[layer_type] = (cache.keys[i][:b, :, :span], cache.values[i][:b, :, :span])
        drafts = []
        h = hidden
        for _ in range(k):
            x = a.pre_projection(torch.cat([t.embed(last), h], dim=-1))
            out = a.model(
                input_ids=None,
                inputs_embeds=x,
                attention_mask=masks,
                position_ids=positions,
                shared_kv_states=shared,
                use_cache=False,
            )
            self.forwards += 1
            hs = out.last_hidden_state
            logits = a.masked_embedding(hs, a.lm_head.weight) if a.config.use_ordered_embeddings else a.lm_head(hs)
            last = logits.argmax(-1)
            h = a.post_projection(hs)
            drafts.append(last)
        return torch.cat(drafts, 1), None

    def rollback(self, s, accepted, before) -> None:
        pass


class AREngine:
    """`stream(requests, batch_size)` for a target `CausalLM`, optionally with a drafter of k tokens per round.

    `schedule="heuristic"` adapts each row's k as transformers does for one sequence (+2 after a round that
    accepted every draft, else -1, at least 1), per row and restarting for every request."""

    def __init__(
        self,
        target: CausalLM,
        tokenizer,
        eos_ids,
        sampling: TokenSampling,
        drafter=None,
        k: int = 0,
        schedule: str = "constant",
    ):
        if drafter is not None and not 1 <= k < PREFILL_CHUNK:
            raise ValueError(f"num_draft_tokens must be in [1, {PREFILL_CHUNK - 1}], got {k}")
        self.target, self.tokenizer, self.eos_ids = target, tokenizer, set(eos_ids)
        self.sampling, self.drafter, self.k = sampling, drafter, k if drafter is not None else 0
        self.schedule = schedule
        self.stats: dict[str, float] = {}

    @torch.no_grad()
    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """Decode with at most `batch_size` rows in flight; yield each result the moment it finishes."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        queue = iter(requests)
        first = list(islice(queue, batch_size))
        if not first:
            return
        t = self.target
        capacity = max(len(r.prompt_ids) + r.max_new_tokens + self.k + 1 for r in first)  # grows if needed
        cache = t.new_cache(batch_size, capacity, PREFILL_CHUNK)
        if self.drafter is not None:
            self.drafter.open(batch_size, capacity, self.k)
        pending = iter(first + [None])  # None: the first batch is used up, read on from the queue
        slots: list[_Seq | None] = [None] * batch_size
        hidden = torch.zeros((batch_size, 1, t.text_config.hidden_size), dtype=t.dtype, device=t.device)
        exhausted = False
        self.prefill_forwards = steps = rows_computed = rows_busy = 0
        drafted_at_start = getattr(self.drafter, "forwards", 0)
        while True:
            t0 = time.perf_counter()
            free = [r for r in range(batch_size) if slots[r] is None]
            new: list[_Seq] = []
            for r in free if not exhausted else []:
                req = next(pending, None) or next(queue, None)
                if req is None:
                    exhausted = True
                    break
                check_request(req)
                res = GenerationResult(req.sample_id, [], "", 0, prompt_tokens=len(req.prompt_ids))
                slots[r] = _Seq(req, res, time.perf_counter(), r)
                new.append(slots[r])
            if new:
                self._prefill(cache, new)
            active = [s for s in slots if s is not None]
            if not active:
                self.stats = {
                    "steps": steps,
                    "row_utilization": rows_busy / rows_computed if rows_computed else 1.0,
                    "prefill_forwards": self.prefill_forwards,
                    "draft_forwards": getattr(self.drafter, "forwards", 0) - drafted_at_start,
                    "kv_bytes_written": cache.bytes_written,
                    "kv_bytes_moved": cache.bytes_moved,
                }
                return
            b = max(s.row for s in active) + 1  # rows 0..b-1 run together (no gather); idle ones are waste
            finished = self._step(cache, active, b, hidden)
            steps, rows_computed, rows_busy = steps + 1, rows_computed + b, rows_busy + len(active)
            now = time.perf_counter()
            for s in active:
                s.result.wall_time_s += (now - t0) / len(active)
            for s in finished:
                slots[s.row] = None
                yield self._finish(s, now)

    # --- admission and one step ---------------------------------------------------------------------------
    def _prefill(self, cache: SlotCache, seqs: list[_Seq]) -> None:
        """Encode newly admitted prompts but their last token into their own rows, in chunks. The last prompt
        token is the first step's input, so that step's forward yields the first new token and is the row's
        first NFE, as the prefill is in transformers' `generate()` (and, with drafts, its first verify)."""
        t, dev = self.target, self.target.device
        rows = [s.row for s in seqs]
        cache.reset(rows)
        if self.drafter is not None:
            self.drafter.admit(seqs)
        for s in seqs:
            s.k = self.k
        heads = [s.req.prompt_ids[:-1] for s in seqs]
        width = max(len(p) for p in heads)
        for lo in range(0, width, PREFILL_CHUNK):
            hi = min(width, lo + PREFILL_CHUNK)
            ids = torch.zeros((len(seqs), hi - lo), dtype=torch.long)
            for i, p in enumerate(heads):
                part = p[lo:hi]
                ids[i, : len(part)] = torch.tensor(part, dtype=torch.long)
            t.forward(cache, rows, [lo] * len(seqs), ids.to(dev))
            self.prefill_forwards += 1

    def _step(self, cache: SlotCache, seqs: list[_Seq], b: int, hidden: torch.Tensor) -> list[_Seq]:
        """One target forward over rows 0..b-1: each row's last token (and its drafts) verified, tokens kept."""
        t, dev = self.target, self.target.device
        by_row = {s.row: s for s in seqs}
        mtp = isinstance(self.drafter, MTPDrafter)
        # as transformers: at most max_new - generated - 1 drafts; MTP drafts only once the target ran the row
        budget = {
            s.row: 0 if mtp and not s.has_hidden else max(0, min(s.k, s.req.max_new_tokens - len(s.tokens) - 1))
            for s in seqs
        }
        k = max(budget.values()) if self.k else 0
        drafts = probs = None
        drafted_before = getattr(self.drafter, "forwards", 0)
        if k:
            drafts, probs = self.drafter.draft(seqs, b, k, cache, hidden[:b]) if mtp else self.drafter.draft(seqs, b, k)
        ids = torch.zeros((b, k + 1), dtype=torch.long)
        starts = [0] * b
        for r in range(b):
            if r in by_row:
                ids[r, 0], starts[r] = by_row[r].last(), by_row[r].length - 1
            else:
                cache.reset([r])  # an idle row computes dummies at position 0 of its empty slots
        ids = ids.to(dev)
        if k:
            ids[:, 1:] = drafts
        h = t.forward(cache, None, starts, ids)
        logits = t.logits(h)
        seeds = torch.tensor([by_row[r].req.seed if r in by_row else 0 for r in range(b)], device=dev)
        positions = torch.tensor(starts, device=dev)[:, None] + 1 + torch.arange(k + 1, device=dev)
        if k:
            num = torch.tensor([budget.get(r, 0) for r in range(b)], device=dev)
            accepted, tokens = verify(logits, drafts, probs, num, self.sampling, seeds, positions)
        else:
            accepted = torch.zeros(b, dtype=torch.long, device=dev)
            tokens = pick(logits, self.sampling, seeds, positions, streams.TOKEN)
        if mtp:  # the drafter starts from the target's hidden state where the bonus token was predicted
            hidden[:b] = h.gather(1, accepted[:, None, None].expand(b, 1, h.shape[-1]))
        host = torch.cat([accepted[:, None], tokens], 1).tolist()  # the one device read of the step
        done = []
        draft_forwards = getattr(self.drafter, "forwards", 0) - drafted_before  # shared by the rows of the step
        seqs[0].result.row_forwards += b - len(seqs)  # idle rows computed this step: counted as waste
        for s in seqs:
            m, *toks = host[s.row]
            before, drafted = s.length, budget[s.row]
            s.result.nfe += 1
            s.result.row_forwards += 1
            s.has_hidden = True
            if self.k:
                s.result.extra["draft_forwards"] = s.result.extra.get("draft_forwards", 0) + draft_forwards
                if not s.result.accepted_per_step:
                    s.result.accepted_per_step.append([])
                s.result.accepted_per_step[0].append(m + 1)
                if self.schedule != "constant" and drafted:
                    s.k = s.k + 2 if m == drafted else max(1, s.k - 1)
                    s.k = min(s.k, PREFILL_CHUNK - 1)
            if k and self.drafter is not None:
                self.drafter.rollback(s, m, before)
            if self._extend(s, toks[: m + 1]):
                done.append(s)
        return done

    def _extend(self, s: _Seq, toks: list[int]) -> bool:
        """Append new tokens; True when the sequence ended (EOS, stop string or length)."""
        if not s.tokens and toks:  # the first accepted token: what a streaming user sees first
            s.result.ttft_s = time.perf_counter() - s.admitted
        s.tokens.extend(toks)
        if len(s.tokens) >= s.req.max_new_tokens or not self.eos_ids.isdisjoint(toks):
            return True
        if not s.req.stop_strings:  # no stop strings: EOS and length decide (no detokenizing every step)
            return False
        _, _, reason = cut_at_stop(self.tokenizer, s.tokens, self.eos_ids, s.req.stop_strings)
        return reason != "length"

    def _finish(self, s: _Seq, now: float) -> GenerationResult:
        req, res = s.req, s.result
        toks, text, reason = cut_at_stop(self.tokenizer, s.tokens[: req.max_new_tokens], self.eos_ids, req.stop_strings)
        res.token_ids, res.text, res.finished_by = toks, text, reason
        res.latency_s = now - s.admitted
        res.extra.update({"generated_before_cut": len(s.tokens), "engine": "continuous"})
        if self.k:
            per_step = res.accepted_per_step[0]
            res.extra.update({"tokens_per_verify": per_step, "accepted_drafts": sum(per_step) - len(per_step)})
        return res
