"""The AR families' engine: AR, AR + draft / MTP and a diffusion checkpoint's own AR mode, on the shared
continuous-batching loop (`harness.engine.loop`) and per-row KV slots (`models.cache.slot_cache`).

    admit queued requests into free rows (prefill, in chunks; plain AR takes each row's first token from it)
    -> every step, for every row in flight: [draft k tokens] -> one target forward over the row's last token
       (and its drafts) -> each row accepts its own prefix (+ the target's bonus token)
    -> a row whose sequence ended (EOS / stop string / length) leaves at once and its result is yielded;
       a queued request takes its row on the next step.

The same engine as the diffusion decoder's in what it measures: a finished row leaves and its slot is refilled,
one host read per step (the accepted counts and tokens), NFE = target forwards (prefill included), row
utilisation recorded, sampled tokens from counter-based streams keyed by (seed, position), so a sample's tokens
do not depend on its batch (`samplers.token_draw`). Rejected draft positions are rolled back by starting the
row's next write earlier: no K/V is copied.

The model adapters (`models.ar`, `models.same_weights_ar`) load the target, its tokenizer and drafter;
`ARFamilyDecoder` is the decoder the family registry builds around one (`contract.families`). The drafters (an
ordinary draft model, Gemma 4's MTP assistant) are in `models.drafters`; the target wrapper in `models.causal_lm`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch

from contract.records import GenerationRequest, GenerationResult, check_request, check_requests
from contract.text import Prompt, cut_at_stop
from harness.engine import loop
from models.cache.slot_cache import SlotCache
from models.causal_lm import PREFILL_CHUNK, CausalLM
from models.drafters import Drafter
from samplers import streams
from samplers.token_draw import TokenSampling, pick, verify
from samplers.token_rule import TokenRuleConfig


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


@dataclass
class _Batch:
    """The AR families' batch state in the loop: one `_Seq` per row in flight, the target's KV slots (made at the
    first admission) and the run's counters."""

    slots: list[_Seq | None]
    drafted_at_start: int = 0
    cache: SlotCache | None = None
    hidden: torch.Tensor | None = None  # the target's hidden state per row (where an MTP drafter starts)
    first: Iterator[GenerationRequest] = field(default_factory=lambda: iter(()))  # the requests that sized it
    exhausted: bool = False
    ended: list[_Seq] = field(default_factory=list)  # rows that ended at their prefill, retired this step
    steps: int = 0
    rows_computed: int = 0
    rows_busy: int = 0
    prefill_forwards: int = 0

    def busy(self) -> list[int]:
        return [r for r, s in enumerate(self.slots) if s is not None]

    def stats(self, drafted: int) -> dict[str, float]:
        cache = self.cache
        return {
            "steps": self.steps,
            "row_utilization": self.rows_busy / self.rows_computed if self.rows_computed else 1.0,
            "prefill_forwards": self.prefill_forwards,
            "draft_forwards": drafted - self.drafted_at_start,
            "kv_bytes_written": cache.bytes_written if cache else 0,
            "kv_bytes_moved": cache.bytes_moved if cache else 0,
            "kv_bytes_gathered": cache.bytes_gathered if cache else 0,
        }


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
        drafter: Drafter | None = None,
        k: int = 0,
        schedule: str = "constant",
    ):
        if drafter is not None and not 1 <= k < PREFILL_CHUNK:
            raise ValueError(f"num_draft_tokens must be in [1, {PREFILL_CHUNK - 1}], got {k}")
        self.target, self.tokenizer, self.eos_ids = target, tokenizer, set(eos_ids)
        self.sampling, self.drafter, self.k = sampling, drafter, k if drafter is not None else 0
        self.schedule = schedule
        self.stats: dict[str, float] = {}

    def _drafted(self) -> int:
        return self.drafter.forwards if self.drafter is not None else 0

    @torch.inference_mode()
    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """Decode with at most `batch_size` rows in flight; yield each result the moment it finishes
        (`harness.engine.loop.run` over the steps below)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batch = _Batch([None] * batch_size, drafted_at_start=self._drafted())
        yield from loop.run(self, batch, requests, batch_size)
        self.stats = batch.stats(self._drafted())

    # --- the loop's named steps -----------------------------------------------------------------------
    def admit(self, batch: _Batch, queue: Iterator[GenerationRequest], batch_size: int) -> None:
        """Queued requests take the free rows and are prefilled; the KV slots are sized by the first requests
        (they grow if a later one needs more)."""
        if batch.exhausted:
            return
        if batch.cache is None:
            first = list(islice(queue, batch_size))
            if not first:
                batch.exhausted = True
                return
            batch.first = iter(first)
            capacity = max(len(r.prompt_ids) + r.max_new_tokens + self.k + 1 for r in first)
            batch.cache = self.target.new_cache(batch_size, capacity, PREFILL_CHUNK)
            if self.drafter is not None:
                self.drafter.open(batch_size, capacity, self.k)
            hidden = self.target.text_config.hidden_size
            batch.hidden = torch.zeros((batch_size, 1, hidden), dtype=self.target.dtype, device=self.target.device)
        new = []
        for r in [r for r, s in enumerate(batch.slots) if s is None]:
            req = next(batch.first, None) or next(queue, None)
            if req is None:
                batch.exhausted = True
                break
            check_request(req)
            res = GenerationResult(req.sample_id, [], "", 0, prompt_tokens=len(req.prompt_ids))
            batch.slots[r] = _Seq(req, res, time.perf_counter(), r)
            new.append(batch.slots[r])
        if new and self.drafter is None:  # the prefill forward yielded the new rows' first tokens
            batch.rows_computed, batch.rows_busy = batch.rows_computed + len(new), batch.rows_busy + len(new)
        if new:
            batch.ended += self._prefill(batch, new)  # plain AR: a row may end on its first token

    def pack(self, batch: _Batch) -> None:
        """Nothing to move: a step over sparse rows reads them as a gathered batch instead (`_step`)."""

    def step(self, batch: _Batch, busy: list[int]) -> list[_Seq]:
        """One target forward over the rows still running; the rows it finished."""
        ended = {s.row for s in batch.ended}
        active = [batch.slots[r] for r in busy if r not in ended]
        if not active:
            return []
        b = max(s.row for s in active) + 1  # the rows a step may run (0..b-1)
        finished, computed = self._step(batch.cache, active, b, batch.hidden)
        batch.steps, batch.rows_computed = batch.steps + 1, batch.rows_computed + computed
        batch.rows_busy += len(active)
        return finished

    def commit(self, batch: _Batch, busy: list[int], finished: list[_Seq]) -> list[int]:
        """The rows that leave: those that ended at their prefill and those this step finished."""
        leaving = [s.row for s in batch.ended + finished]
        batch.ended = []
        return leaving

    def retire(
        self, batch: _Batch, busy: list[int], leaving: list[int], t0: float, read: list[_Seq]
    ) -> Iterator[GenerationResult]:
        now = time.perf_counter()
        for r in busy:
            batch.slots[r].result.wall_time_s += (now - t0) / len(busy)
        for r in leaving:
            s, batch.slots[r] = batch.slots[r], None
            yield self._finish(s, now)

    # --- admission and one step ---------------------------------------------------------------------------
    def _prefill(self, batch: _Batch, seqs: list[_Seq]) -> list[_Seq]:
        """Encode newly admitted prompts into their own rows, in chunks; return the rows already finished.

        Plain AR encodes the whole prompt and the forward holding a row's last prompt token yields its first
        new token: the row's first NFE, as the prefill is in transformers' `generate()`. With a drafter the
        last prompt token is left for the first step, whose forward verifies it together with the first drafts,
        as assisted generation's first verify does."""
        t, dev, cache = self.target, self.target.device, batch.cache
        rows = [s.row for s in seqs]
        cache.reset(rows)
        if self.drafter is not None:
            self.drafter.admit(seqs)
        for s in seqs:
            s.k = self.k
        first_here = self.drafter is None
        heads = [s.req.prompt_ids if first_here else s.req.prompt_ids[:-1] for s in seqs]
        width = max(len(p) for p in heads)
        last = [None] * len(seqs)  # hidden state at each row's last prompt position
        for lo in range(0, width, PREFILL_CHUNK):
            # only rows with tokens left run; a row ending inside the chunk is padded past its end (rewritten later)
            part = [i for i, p in enumerate(heads) if len(p) > lo]
            chunks = [heads[i][lo : lo + PREFILL_CHUNK] for i in part]
            n = max(len(q) for q in chunks)
            ids = torch.tensor([q + [0] * (n - len(q)) for q in chunks], dtype=torch.long, device=dev)
            h = t.forward(cache, [rows[i] for i in part], [lo] * len(part), ids, [len(q) for q in chunks])
            batch.prefill_forwards += 1
            for j, (i, q) in enumerate(zip(part, chunks, strict=True)):
                if first_here and lo + len(q) == len(heads[i]):
                    last[i] = h[j, len(q) - 1]
        if not first_here:
            return []
        seeds = torch.tensor([s.req.seed for s in seqs], device=dev)
        positions = torch.tensor([len(p) for p in heads], device=dev)[:, None]
        tokens = pick(t.logits(torch.stack(last)[:, None]), self.sampling, seeds, positions, streams.TOKEN)
        done = []
        for s, tok in zip(seqs, tokens.tolist(), strict=True):
            s.result.nfe += 1
            s.result.row_forwards += 1
            s.has_hidden = True
            if self._extend(s, tok):
                done.append(s)
        return done

    def _step(self, cache: SlotCache, seqs: list[_Seq], b: int, hidden: torch.Tensor) -> tuple[list[_Seq], int]:
        """One target forward: each row's last token (and its drafts) verified, tokens kept.

        The forward runs rows 0..b-1 in place (idle ones compute dummies, counted as waste), or, for plain AR
        once at most half of them are busy (the end of a run), only the busy rows, whose K/V attention then
        reads as a gathered batch (`SlotCache.bytes_gathered`)."""
        t, dev = self.target, self.target.device
        by_row = {s.row: s for s in seqs}
        mtp = self.drafter is not None and self.drafter.needs_hidden
        gather = self.drafter is None and 2 * len(seqs) <= b
        run = sorted(by_row) if gather else list(range(b))
        # as transformers: at most max_new - generated - 1 drafts; MTP drafts only once the target ran the row
        budget = {
            s.row: 0 if mtp and not s.has_hidden else max(0, min(s.k, s.req.max_new_tokens - len(s.tokens) - 1))
            for s in seqs
        }
        k = max(budget.values()) if self.k else 0
        drafts = probs = None
        drafted_before = self._drafted()
        if k:
            drafts, probs = self.drafter.draft(seqs, b, k, cache, hidden[:b])
        last, starts = [0] * len(run), [0] * len(run)
        for i, r in enumerate(run):
            if r in by_row:
                last[i], starts[i] = by_row[r].last(), by_row[r].length - 1
            else:
                cache.reset([r])  # an idle row computes dummies at position 0 of its empty slots
        ids = torch.tensor(last, dtype=torch.long, device=dev)[:, None]
        if k:
            ids = torch.cat([ids, drafts], 1)
        h = t.forward(cache, run if gather else None, starts, ids)
        logits = t.logits(h)
        seeds = torch.tensor([by_row[r].req.seed if r in by_row else 0 for r in run], device=dev)
        positions = torch.tensor(starts, device=dev)[:, None] + 1 + torch.arange(k + 1, device=dev)
        if k:
            num = torch.tensor([budget.get(r, 0) for r in run], device=dev)
            accepted, tokens = verify(logits, drafts, probs, num, self.sampling, seeds, positions)
        else:
            accepted = torch.zeros(len(run), dtype=torch.long, device=dev)
            tokens = pick(logits, self.sampling, seeds, positions, streams.TOKEN)
        if mtp:  # the drafter starts from the target's hidden state where the bonus token was predicted
            hidden[:b] = h.gather(1, accepted[:, None, None].expand(b, 1, h.shape[-1]))
        host = dict(zip(run, torch.cat([accepted[:, None], tokens], 1).tolist(), strict=True))  # one device read
        done = []
        draft_forwards = self._drafted() - drafted_before  # shared by the rows of the step
        seqs[0].result.row_forwards += len(run) - len(seqs)  # idle rows computed this step: counted as waste
        for s in seqs:
            m, *toks = host[s.row]
            if self._accept(s, m, toks, budget[s.row], draft_forwards, k):
                done.append(s)
        return done, len(run)

    def _accept(self, s: _Seq, m: int, toks: list[int], drafted: int, draft_forwards: int, k: int) -> bool:
        """Row `s` keeps its `m` accepted drafts and the target's token after them (`toks`: the step's tokens for
        the row); its k adapts; the drafter rolls back the rest. True when the sequence ended."""
        before = s.length
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
        if k:
            self.drafter.rollback(s, m, before)
        return self._extend(s, toks[: m + 1])

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


class ARFamilyDecoder:
    """The `contract.decoding.Decoder` of every AR family: an adapter's target, tokenizer, EOS ids and drafter
    (`new_drafter(rule)`, None for plain AR) on an `AREngine`, with the run's token rule as its sampler
    (`samplers.token_rule.TokenRuleConfig`: greedy, or sampled with top-k / top-p)."""

    def __init__(self, model, sampler: TokenRuleConfig | None = None):
        self.model, self.label, self.tokenizer = model, model.label, model.tokenizer
        self.resumable = True  # every random number is keyed by (sample seed, position): batch-invariant
        k = getattr(model, "num_draft_tokens", 0)
        self.sampler = sampler = sampler or TokenRuleConfig()  # None: the family's default, greedy
        drafter = model.new_drafter(sampler)
        self.engine = AREngine(
            model.target, model.tokenizer, model.eos_ids, sampler, drafter, k if drafter else 0,
            getattr(model, "schedule", "constant"),
        )  # fmt: skip

    def encode(self, prompt: Prompt) -> list[int]:
        return self.model.encode(prompt)

    def describe(self) -> dict[str, Any]:
        rule = self.sampler
        sampled = {k: getattr(rule, k) if rule.do_sample else None for k in ("temperature", "top_p", "top_k")}
        return {**self.model.describe(), "do_sample": rule.do_sample, **sampled}

    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        return self.engine.stream(requests, batch_size)

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Decode a list together (one batch of all of them); results in request order."""
        check_requests(requests)
        out = {r.sample_id: r for r in self.stream(requests, batch_size=max(1, len(requests)))}
        return [out[r.sample_id] for r in requests]
