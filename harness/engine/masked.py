"""The masked (absorbing-state) block-diffusion family's steps in the continuous-batching loop every family runs
(`harness.engine.loop`): requests stream in, finished samples stream out.

    admit   queued requests into free rows: a row's first block holds its prompt's tail and mask tokens
    step    one forward for every busy row, each at its own block and step (`models.masked_diffusion`), then
            the sampler's rule on each row's block or sub-block (`samplers.masked`), then one host read
    commit  per row: the filled / edited tokens, EOS, the block's end (no mask left and nothing more to edit,
            or the step / editing cap), the next block
    retire  rows whose sequence ended (EOS, stop string, length) leave; their rows are refilled next step
    (pack: nothing; a step runs only the busy rows, whose cached K/V it reads by row)

A row's blocks follow the model's layout (`models.loading.masked_checks.DecodeLayout`, the one object that answers
where blocks lie, what a step's canvas is, a block's sub-blocks and whether its first token is the AR seed):
`block_origin: absolute` (LLaDA2Pipeline's): aligned at position 0 (the prompt included),
`ceil((prompt + max_new_tokens) / L)` of them, positions past prompt + max_new_tokens decoded, never returned, and
attended or hidden by the model's `tail` rule; `block_origin: prompt` (LLaDA's generate.py, Dream's
diffusion_generate): blocks start at the prompt's end, the last one ends at prompt + max_new_tokens (shorter when the
answer is not a multiple of L); `block_length: answer`: one block, the whole answer (Dream); `canvas: answer` runs
each step over the whole answer, the later blocks' positions as masks (tests/test_bidirectional_families.py); an
AR-seeded model (Nemotron-Labs-Diffusion: `attention: prefix_causal`, blocks from the prompt's end) commits a block's
first token alone at its first forward, the model's AR prediction (tests/test_nemotron_diffusion.py); `sub_block`:
the rule fills a block's sub-blocks in turn, each forward running the whole block (Fast-dLLM v2).
The sampler is the rule (`samplers.masked_rule`: its plan, step, block end and EOS rule; the engine reads no knob
of it but the block length and whether to record trajectories, plus the rule's opt-ins: a carry across blocks,
a carry's canvas cut, the shadow block): with `block_refinement` one row decodes exactly as
LLaDA2Pipeline decodes it alone (tests/test_masked_decode.py), with `llada2_editing` as LLaDA 2.1's own generate
(tests/test_block_causal_families.py), less a forward both spend after a block's last mask with editing off, which
changes nothing; an `even` schedule splits the block (LLaDA's get_num_transfer_tokens on a block of masks).
Rows in one step whose blocks differ in length are padded with a filler token that is no mask and hidden.
Random numbers: `samplers.streams` uniforms keyed by (sample seed, block index, forward in the block, position).
TPF: valid output tokens / denoising forwards (`nfe`), the one rule of `contract.records`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, check_request
from contract.text import cut_at_stop
from harness.engine import loop
from models.loading.masked_checks import RowSpan
from models.masked_diffusion import BlockQuery
from samplers.masked import MaskedSamplerConfig
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn, MaskedStepOut, RowTokens


@dataclass
class _Row:
    """Host state of one request in flight: its sequence so far and where it is in its current block."""

    req: GenerationRequest
    result: GenerationResult
    admitted: float
    seq: list[int]  # prompt + committed blocks (everything before the current block)
    block: list[int]
    span: RowSpan  # where its blocks lie (the layout's)
    prompt_len: int
    gen_end: int  # prompt + max_new_tokens: later positions are hidden and never returned
    plan: BlockPlan = field(default_factory=lambda: BlockPlan(1))  # the rule's plan for the current (sub-)block
    windows: list[tuple[int, int]] = field(default_factory=list)  # the block's sub-blocks to fill, current first
    carry: dict[str, Any] | None = None  # the rule's memory between the steps of a (sub-)block
    cut: int = -1  # where the rule's carry cuts the next forward's canvas (positions of the block; -1: no cut)
    step_idx: int = 0  # steps with masks left, as LLaDA2Pipeline counts them
    post_steps: int = 0  # editing forwards after the (sub-)block's last mask
    forwards: int = 0  # forwards in this block (the random stream's step key)
    finished: bool = False  # EOS committed with no mask before it
    fills: list[int] = field(default_factory=list)
    remasks: list[int] = field(default_factory=list)

    @property
    def block_index(self) -> int:
        return (len(self.seq) - self.span.origin) // self.span.width

    def window(self) -> list[int]:
        """The tokens of the sub-block the rule fills (the whole block without sub-blocks)."""
        lo, hi = self.windows[0]
        return self.block if (lo, hi) == (0, len(self.block)) else self.block[lo:hi]


@dataclass
class _Batch:
    """The loop's state: a request per row (None: free) and the model's per-row context (cached K/V)."""

    rows: list[_Row | None]
    state: Any

    def busy(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r is not None]


@dataclass
class _StepOut:
    """What the host reads after a step, per busy row."""

    block: list[list[int]]
    changed: list[list[bool]]  # filled or edited this step
    filled: list[int]
    edited: list[int]
    remasked: list[int]
    carry: list[dict[str, Any] | None]
    cut: list[int]  # per row: the carry's `canvas_end` (-1: none)


def _cuts(carry: list[dict[str, Any] | None], like: torch.Tensor) -> torch.Tensor:
    """(B, 1) long: each row's `canvas_end` from the rule's carry (-1 where none), read in the step's host read."""
    ends = [c.get("canvas_end", -1) if c else -1 for c in carry] if carry else [-1] * like.shape[0]
    if all(isinstance(e, int) for e in ends):
        return torch.tensor(ends, device=like.device)[:, None]
    return torch.stack([torch.as_tensor(e, device=like.device).reshape(()) for e in ends]).long()[:, None]


class MaskedDiffusionDecoder:
    """`contract.decoding.Decoder` over `models.masked_diffusion.MaskedDiffusionAdapter`, continuous batching."""

    label = DecoderKind.MASKED
    resumable = True

    def __init__(self, model, sampler: MaskedSamplerConfig):
        self.model, self.sampler, self.tokenizer = model, sampler, model.tokenizer
        # a block-causal model attends in the decode's blocks (as LLaDA 2.x's own generate builds its mask)
        self.layout = model.layout.decoding(sampler.block_length)
        self.block_length = self.layout.block_length
        self.rule = sampler.resolved(self.layout.schedule, self.layout.confidence)
        # the rule's carry outlives a block (`samplers.masked_rule`); with sub-blocks it stays per sub-block, as the
        # columns after a sub-block are not handed over
        self.across = self.rule.carry_across_blocks and self.layout.sub_block is None
        self.shadow = self.rule.shadow_queries  # WINO's verify queries in the forward
        refusal = model.shadow_refusal() if self.shadow else None
        if refusal:
            raise ValueError(f"sampler.verify: shadow: {refusal} (verify: self runs anywhere)")
        self.filler = model.pad_id if model.pad_id >= 0 and model.pad_id != model.mask_id else 0

    def encode(self, prompt) -> list[int]:
        return self.model.encode(prompt)

    def describe(self) -> dict:
        knobs, used = self.sampler.knobs(), self.rule.knobs()  # the rule's: null schedule / confidence resolved
        decode = {**self.layout.describe(), "block_length": self.block_length}
        decode |= {k: used[k] for k in ("schedule", "confidence")}
        return {
            **self.model.describe(), "label": self.label, "sampler": knobs, "decode_block": self.block_length,
            "decode": decode,
        }  # fmt: skip

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        out = {r.sample_id: r for r in self.stream(requests, batch_size=max(1, len(requests)))}
        return [out[r.sample_id] for r in requests]

    @torch.no_grad()
    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """At most `batch_size` rows in flight; each result is yielded the moment its row ends
        (`harness.engine.loop.run` over the steps below)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        yield from loop.run(self, _Batch([None] * batch_size, self.model.open(batch_size)), requests, batch_size)

    # ----------------------------------------------------------------------------------------------
    # admit

    def admit(self, batch: _Batch, queue: Iterator[GenerationRequest], batch_size: int) -> None:
        free = [i for i, r in enumerate(batch.rows) if r is None]
        for i, req in zip(free, islice(queue, len(free)), strict=False):
            batch.rows[i] = self._start(req)

    def pack(self, batch: _Batch) -> None:
        """Nothing to pack: a step runs only the busy rows (their cached K/V are read by row index)."""

    def _start(self, req: GenerationRequest) -> _Row:
        check_request(req)
        p, mask = len(req.prompt_ids), self.model.mask_id
        span = self.layout.span(p, req.max_new_tokens)
        res = GenerationResult(req.sample_id, [], "", 0, prompt_tokens=p)
        tail = list(req.prompt_ids[span.start :])
        block = tail + [mask] * (span.size_at(span.start) - len(tail))
        row = _Row(
            req, res, time.perf_counter(), list(req.prompt_ids[: span.start]), block, span, p, p + req.max_new_tokens
        )
        self._open(row)
        return row

    def _open(self, r: _Row) -> None:
        """A new block: its sub-blocks (the layout's) and the rule's plan for the first."""
        r.windows = self.layout.windows(r.block, self.model.mask_id)
        self._plan(r)

    def _plan(self, r: _Row) -> None:
        """The rule's plan for the row's current (sub-)block; only a block's first is AR-seeded."""
        lo, hi = r.windows[0]
        seeded = self.layout.seeded and lo == 0
        width = self.layout.window_width(r.span.width)
        r.plan = self.rule.plan(hi - lo, r.req.max_new_tokens, width, seeded)
        r.step_idx = r.post_steps = 0
        r.cut = -1
        if not self.across:
            r.carry = None

    # ----------------------------------------------------------------------------------------------
    # step

    def step(self, batch: _Batch, busy: list[int]) -> _StepOut:
        """One forward for every busy row, then the rule on each row's (sub-)block, then one host read."""
        model, dev = self.model, self.model.device
        rows, mask = [batch.rows[i] for i in busy], model.mask_id
        for r in rows:
            if mask not in r.window():
                r.post_steps += 1
        n = max(len(r.block) for r in rows)  # rows with a shorter block: filler (no mask, hidden) to the right
        blocks = [r.block + [self.filler] * (n - len(r.block)) for r in rows]
        queries = [
            BlockQuery(i, r.seq, b, r.gen_end, len(r.seq) + r.cut if r.cut >= 0 else self.layout.canvas_end(r.gen_end))
            for i, r, b in zip(busy, rows, blocks, strict=True)
        ]
        extra = max(0, *(q.canvas_end - q.start - n for q in queries)) if self.across else 0
        kw = {"ahead": extra} if extra else {}
        logits = model.forward(batch.state, queries, n, **kw, **({"shadow": True} if self.shadow else {}))
        logits, ahead = (logits[:, :n], logits[:, n:]) if self.across else (logits, None)  # cached: no columns past n
        block = torch.tensor(blocks, device=dev)
        at = torch.arange(n, device=dev)
        start = torch.tensor([len(r.seq) for r in rows], device=dev)[:, None] + at
        editable = start >= torch.tensor([r.prompt_len for r in rows], device=dev)[:, None]
        editable &= at < torch.tensor([len(r.block) for r in rows], device=dev)[:, None]
        keys = [[r.req.seed for r in rows], [r.block_index for r in rows], [r.forwards for r in rows]]
        inp = MaskedStepIn(
            logits, block, editable, [r.plan for r in rows], [r.step_idx for r in rows],
            [r.forwards == 0 for r in rows], torch.tensor(keys, dtype=torch.long, device=dev), mask,
            [r.carry for r in rows], ahead,
        )  # fmt: skip
        out = self._windowed(inp, rows)
        new, fill, edit = out.block, out.filled, out.edited
        host = torch.cat([new, fill | edit, fill.sum(-1, keepdim=True), edit.sum(-1, keepdim=True)], dim=1)
        host = torch.cat([host.long(), out.remasked.sum(-1, keepdim=True), _cuts(out.carry, host)], dim=1)
        host = host.cpu().tolist()  # the one read
        size = [len(r.block) for r in rows]
        return _StepOut(
            [h[:m] for h, m in zip(host, size, strict=True)],
            [[bool(x) for x in h[n : n + m]] for h, m in zip(host, size, strict=True)],
            [h[2 * n] for h in host], [h[2 * n + 1] for h in host], [h[2 * n + 2] for h in host], out.carry,
            [h[2 * n + 3] for h in host],
        )  # fmt: skip

    def _windowed(self, inp: MaskedStepIn, rows: list[_Row]) -> MaskedStepOut:
        """The rule's step on each row's current sub-block (its columns gathered, the answer written back into the
        block); where every row fills its whole block, on the block as it is."""
        win = [r.windows[0] for r in rows]
        n = inp.block.shape[1]
        if all(w == (0, len(r.block)) for w, r in zip(win, rows, strict=True)):
            return self.rule.step(inp)
        dev, width = inp.block.device, max(hi - lo for lo, hi in win)
        idx = torch.tensor([lo for lo, _ in win], device=dev)[:, None] + torch.arange(width, device=dev)
        valid = idx < torch.tensor([hi for _, hi in win], device=dev)[:, None]
        cols = idx.clamp(max=n - 1)
        logits = inp.logits.gather(1, cols[..., None].expand(-1, -1, inp.logits.shape[-1]))
        block = torch.where(valid, inp.block.gather(1, cols), self.filler)
        sub = MaskedStepIn(
            logits, block, inp.editable.gather(1, cols) & valid, inp.plans, inp.step, inp.first, inp.keys,
            inp.mask_id, inp.carry, inp.ahead,
        )  # fmt: skip
        out = self.rule.step(sub)
        back = torch.where(valid, idx, n)  # a column past the block for the padding: dropped

        def put(full: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
            return torch.cat([full, full[:, :1]], dim=1).scatter(1, back, part)[:, :n]

        none = torch.zeros_like(inp.editable)
        return MaskedStepOut(
            put(inp.block, out.block), put(none, out.filled), put(none, out.edited), put(none, out.remasked),
            out.carry,
        )  # fmt: skip

    # ----------------------------------------------------------------------------------------------
    # commit

    def commit(self, batch: _Batch, busy: list[int], out: _StepOut) -> list[int]:
        """Each busy row takes its part of the step; returns the rows whose sequence ended."""
        return [i for k, i in enumerate(busy) if self._commit(batch.rows[i], out, k)]

    def _commit(self, r: _Row, out: _StepOut, k: int) -> bool:
        """Take row k's step; returns whether the row's sequence ended. When a (sub-)block is final and where EOS
        ends a row are the rule's (`block_end`: diffusers' `check_block_should_continue` for block_refinement,
        LLaDA 2.1's loop for llada2_editing; `stops_at_commit`, `stops_at_block_end`)."""
        mask = self.model.mask_id
        had_masks = mask in r.window()
        seed_step = r.plan.seeded and r.forwards == 0  # outside the schedule, as its own generate
        r.block, r.carry, r.cut = out.block[k], out.carry[k] if out.carry else None, out.cut[k]
        res = r.result
        res.nfe += 1
        res.row_forwards += 1
        r.forwards += 1
        r.fills.append(out.filled[k])
        r.remasks.append(out.remasked[k])
        if self.sampler.capture_trajectory:
            self._record(r)
        if out.remasked[k]:
            res.extra["remasked"] = res.extra.get("remasked", 0) + out.remasked[k]
        if out.edited[k]:
            res.extra["edited"] = res.extra.get("edited", 0) + out.edited[k]
        if self.rule.stops_at_commit(self._tokens(r, out.changed[k])):
            r.finished = True
        if had_masks and not seed_step:
            r.step_idx += 1
        if r.finished:
            return True
        progress = BlockProgress(
            had_masks, mask in r.window(), bool(out.edited[k]), r.step_idx, r.plan.steps, r.post_steps, r.carry
        )
        done, capped = self.rule.block_end(progress)
        if not done:
            return False
        r.result.step_cap_hits += int(capped)
        if len(r.windows) > 1:  # the block's next sub-block
            r.windows.pop(0)
            self._plan(r)
            return False
        return self._next_block(r)

    def _tokens(self, r: _Row, changed: list[bool]) -> RowTokens:
        return RowTokens(r.seq, r.block, changed, r.prompt_len, self.model.eos_ids, self.model.mask_id)

    def _record(self, r: _Row) -> None:
        """One trajectory entry (contract/records.py) after the step: the block as it stands (`argmax`: a stopped
        block commits it), its filled positions (`accepted`) and where the block starts in the output (`offset`,
        negative when the first block holds the prompt's tail)."""
        mask = self.model.mask_id
        res = r.result
        res.trajectory = res.trajectory or []
        res.trajectory.append(
            {
                "canvas": r.block_index,
                "step": r.forwards - 1,
                "argmax": list(r.block),
                "accepted": [p for p, t in enumerate(r.block) if t != mask and len(r.seq) + p >= r.prompt_len],
                "offset": len(r.seq) - r.prompt_len,
                "mask_id": mask,
            }
        )

    def _next_block(self, r: _Row) -> bool:
        """The block is final: append it; the row ends at its last block, at the rule's EOS check or a stop string,
        else opens the next."""
        res = r.result
        res.steps_per_canvas.append(r.forwards)
        res.accepted_per_step.append(r.fills)
        res.renoised_per_step.append(r.remasks)
        if res.ttft_s is None and len(r.seq) + len(r.block) > r.prompt_len:
            res.ttft_s = time.perf_counter() - r.admitted
        ended = self.rule.stops_at_block_end(self._tokens(r, []))
        r.seq = r.seq + r.block
        r.forwards = 0
        r.fills, r.remasks = [], []
        if len(r.seq) >= r.span.end or ended:
            return True
        r.block = [self.model.mask_id] * r.span.size_at(len(r.seq))
        self._open(r)
        if r.req.stop_strings:
            out = r.seq[r.prompt_len : r.gen_end]
            return cut_at_stop(self.tokenizer, out, self.model.eos_ids, r.req.stop_strings)[2] != "length"
        return False

    # ----------------------------------------------------------------------------------------------
    # retire

    def retire(
        self, batch: _Batch, busy: list[int], leaving: list[int], t0: float, out: _StepOut
    ) -> Iterator[GenerationResult]:
        """The step's wall time shared out over its rows; the leaving rows' results, each row freed."""
        now = time.perf_counter()
        for i in busy:
            batch.rows[i].result.wall_time_s += (now - t0) / len(busy)
        for i in leaving:
            yield self._retire(batch, i, now)

    def _retire(self, batch: _Batch, i: int, now: float) -> GenerationResult:
        r, batch.rows[i] = batch.rows[i], None
        self.model.release(batch.state, i)
        res = r.result
        if r.finished:  # ended mid-block: its block is part of the output
            res.steps_per_canvas.append(r.forwards)
            res.accepted_per_step.append(r.fills)
            res.renoised_per_step.append(r.remasks)
            r.seq = r.seq + r.block
        toks, text, reason = cut_at_stop(
            self.tokenizer, r.seq[r.prompt_len : r.gen_end], self.model.eos_ids, r.req.stop_strings
        )
        res.token_ids, res.text, res.finished_by = toks, text, reason
        res.latency_s = now - r.admitted
        if res.ttft_s is None:
            res.ttft_s = res.latency_s
        return res
