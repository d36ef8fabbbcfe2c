"""The masked (absorbing-state) block-diffusion family's steps in the continuous-batching loop every family runs
(`harness.engine.loop`): requests stream in, finished samples stream out.

    admit   queued requests into free rows: a row's first block holds its prompt's tail and mask tokens
    step    one forward for every busy row, each at its own block and step (`models.masked_diffusion`), then
            the sampler's draw and fill / edit rule (`samplers.masked`), then one host read
    commit  per row: the filled / edited tokens, EOS, the block's end (no mask left and nothing more to edit,
            or the step / editing cap), the next block
    retire  rows whose sequence ended (EOS, stop string, length) leave; their rows are refilled next step
    (pack: nothing; a step runs only the busy rows, whose cached K/V it reads by row)

A row's blocks follow the model's layout (`models.loading.masked_checks.DecodeLayout`). `block_origin: absolute`
(LLaDA2Pipeline's): aligned at position 0 (the prompt included), `ceil((prompt + max_new_tokens) / L)` of them,
positions past prompt + max_new_tokens decoded, never returned, and attended or hidden by the model's `tail` rule.
The sampler owns the block's rule (its fill schedule, when a block ends, where EOS is checked): with
`block_refinement` one row decodes exactly as LLaDA2Pipeline decodes it alone (tests/test_masked_decode.py), with
`llada2_editing` as LLaDA 2.1's own generate (tests/test_block_causal_families.py), less a forward both spend after a
block's last mask with editing off, which changes nothing. `block_origin: prompt`
(LLaDA's generate.py, Dream's diffusion_generate): blocks start at the prompt's end, the last one ends at prompt +
max_new_tokens (shorter when the answer is not a multiple of L), and an `even` schedule splits the block's masks
(LLaDA's get_num_transfer_tokens); `block_length: answer`: one block, the whole answer (Dream). `canvas: answer`
runs each step over the whole answer, the later blocks' positions as masks (tests/test_bidirectional_families.py).
Rows in one step whose blocks differ in length are padded with a filler token that is no mask and hidden.
An AR-seeded model (`ar_seeded`, Nemotron-Labs-Diffusion: `attention: prefix_causal`, blocks from the prompt's
end) commits a block's first token alone at its first forward, the model's AR prediction
(tests/test_nemotron_diffusion.py).
Random numbers: `samplers.streams` uniforms keyed by (sample seed, block index, forward in the block, position).
TPF: valid output tokens / denoising forwards (`nfe`), the one rule of `contract.records`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

import torch

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, check_request
from contract.text import cut_at_stop
from harness.engine import loop
from models.loading.masked_checks import ANSWER_BLOCK, DecodeLayout
from models.masked_diffusion import BlockQuery
from samplers import streams
from samplers.masked import (
    MaskedSamplerConfig,
    confidence_of,
    draw,
    dream_share,
    refine,
    remask,
)


@dataclass
class _Row:
    """Host state of one request in flight: its sequence so far and where it is in its current block."""

    req: GenerationRequest
    result: GenerationResult
    admitted: float
    seq: list[int]  # prompt + committed blocks (everything before the current block)
    block: list[int]
    prompt_len: int
    gen_end: int  # prompt + max_new_tokens: later positions are hidden and never returned
    end: int  # the last block's end
    origin: int  # where block 0 starts: 0 (absolute) or the prompt's end
    width: int  # the block length (a last block may be shorter)
    steps: int  # refinement steps per block
    schedule: list[int] = field(default_factory=list)  # the even schedule's shares (the dream schedule: none)
    step_idx: int = 0  # steps with masks left, as LLaDA2Pipeline counts them
    post_steps: int = 0  # editing forwards after the block's last mask
    forwards: int = 0  # forwards in this block (the random stream's step key)
    finished: bool = False  # EOS committed with no mask before it
    fills: list[int] = field(default_factory=list)
    remasks: list[int] = field(default_factory=list)

    @property
    def block_index(self) -> int:
        return (len(self.seq) - self.origin) // self.width


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


class MaskedDiffusionDecoder:
    """`contract.decoding.Decoder` over `models.masked_diffusion.MaskedDiffusionAdapter`, continuous batching."""

    label = DecoderKind.MASKED
    resumable = True

    def __init__(self, model, sampler: MaskedSamplerConfig):
        self.model, self.sampler, self.tokenizer = model, sampler, model.tokenizer
        # a block-causal model attends in the decode's blocks (as LLaDA 2.x's own generate builds its mask)
        self.block_length = sampler.block_length or model.block_length
        own = getattr(model, "layout", DecodeLayout())
        self.layout = DecodeLayout(
            own.canvas, own.block_origin, sampler.schedule or own.schedule, sampler.confidence or own.confidence
        )
        self.filler = model.pad_id if model.pad_id >= 0 and model.pad_id != model.mask_id else 0
        self.seeded = getattr(model, "ar_seeded", False)

    def encode(self, prompt) -> list[int]:
        return self.model.encode(prompt)

    def describe(self) -> dict:
        knobs = self.sampler.knobs()
        decode = {**asdict(self.layout), "block_length": self.block_length}
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
        n = req.max_new_tokens if self.block_length == ANSWER_BLOCK else self.block_length
        gen_end = p + req.max_new_tokens
        if self.layout.block_origin == "prompt":  # an AR-seeded model's last block runs whole, as its own generate
            origin, start, end = p, p, (p + -(-req.max_new_tokens // n) * n if self.seeded else gen_end)
        else:
            origin, start, end = 0, p // n * n, -(-gen_end // n) * n
        res = GenerationResult(req.sample_id, [], "", 0, prompt_tokens=p)
        steps = self.sampler.steps_for(req.max_new_tokens, n)
        tail = list(req.prompt_ids[start:])
        block = tail + [mask] * (min(n, end - start) - len(tail))
        prefix = list(req.prompt_ids[:start])
        row = _Row(req, res, time.perf_counter(), prefix, block, p, gen_end, end, origin, n, steps)
        self._plan(row)
        return row

    def _plan(self, r: _Row) -> None:
        """The block's even schedule, the sampler's (`fill_schedule`: diffusers' split of the block; with origin
        prompt a block holds masks only: LLaDA's split of its masks). The dream schedule is computed step by step."""
        masks = len(r.block) - self.seeded  # an AR-seeded block's first token is committed outside the schedule
        r.schedule = self.sampler.fill_schedule(masks, r.steps) if self.layout.schedule == "even" else []

    # ----------------------------------------------------------------------------------------------
    # step

    def step(self, batch: _Batch, busy: list[int]) -> _StepOut:
        """One forward for every busy row, then the draw and the fill / edit / re-mask rule, then one host read."""
        cfg, model, dev = self.sampler, self.model, self.model.device
        state, rows, at = batch.state, [batch.rows[i] for i in busy], busy
        mask = model.mask_id
        for r in rows:
            if mask not in r.block:
                r.post_steps += 1
        n = max(len(r.block) for r in rows)  # rows with a shorter block: filler (no mask, hidden) to the right
        blocks = [r.block + [self.filler] * (n - len(r.block)) for r in rows]
        ends = [r.gen_end if self.layout.canvas == "answer" else 0 for r in rows]
        queries = [BlockQuery(i, r.seq, b, r.gen_end, e) for i, r, b, e in zip(at, rows, blocks, ends, strict=True)]
        logits = model.forward(state, queries, n)
        u = None
        if cfg.temperature > 0:
            key = [[r.req.seed for r in rows], [r.block_index for r in rows], [r.forwards for r in rows]]
            seed, canvas, step = torch.tensor(key, dtype=torch.long, device=dev)
            u = streams.uniforms(seed, canvas, step, n)
        tok, prob = draw(logits, cfg, u)
        rank = confidence_of(logits, cfg, prob, self.layout.confidence)
        block = torch.tensor(blocks, device=dev)
        start = torch.tensor([len(r.seq) for r in rows], device=dev)[:, None] + torch.arange(n, device=dev)
        editable = start >= torch.tensor([r.prompt_len for r in rows], device=dev)[:, None]
        editable &= torch.arange(n, device=dev) < torch.tensor([len(r.block) for r in rows], device=dev)[:, None]
        shares = torch.tensor([self._share(r) for r in rows], device=dev)
        edit_thr = cfg.editing_threshold if cfg.editing else None
        new, fill, edit = refine(block, tok, prob, shares, editable, mask, cfg.threshold, edit_thr, rank)
        if self.seeded:  # a block's first forward commits its first token alone: the AR prediction
            fresh = torch.tensor([[r.forwards == 0] for r in rows], device=dev)
            first = torch.zeros_like(fill)
            first[:, 0] = True
            new = torch.where(fresh, torch.where(first, tok, block), new)
            fill, edit = torch.where(fresh, first, fill), edit & ~fresh
        remasked = torch.zeros_like(fill)
        if cfg.remask_ratio > 0:
            last = torch.tensor([r.step_idx + 1 >= r.steps for r in rows], device=dev)[:, None]
            before = (block != mask) & editable & ~last
            out = remask(new, logits, before, cfg.remask_ratio, mask)
            remasked = out != new
            new = out
        host = torch.cat([new, fill | edit, fill.sum(-1, keepdim=True), edit.sum(-1, keepdim=True)], dim=1)
        host = torch.cat([host.long(), remasked.sum(-1, keepdim=True)], dim=1).cpu().tolist()  # the one read
        size = [len(r.block) for r in rows]
        return _StepOut(
            [h[:m] for h, m in zip(host, size, strict=True)],
            [[bool(x) for x in h[n : n + m]] for h, m in zip(host, size, strict=True)],
            [h[2 * n] for h in host], [h[2 * n + 1] for h in host], [h[2 * n + 2] for h in host],
        )  # fmt: skip

    def _share(self, r: _Row) -> int:
        """This step's fill share: the even schedule's (clamped at its last step, as diffusers) or Dream's count of
        the masks left; with re-masking at least the masks left over the steps left, so the block ends filled."""
        left = r.block.count(self.model.mask_id)
        if r.schedule:  # clamped at its last entry (llada2_editing's has one: its share every step)
            share = r.schedule[min(r.step_idx, len(r.schedule) - 1)]
        else:
            share = dream_share(left, min(r.step_idx, r.steps - 1), r.steps)
        if self.seeded and self.sampler.threshold is not None:
            share = max(share, 1)  # an AR-seeded model's own threshold rule always takes the most confident one
        if self.sampler.remask_ratio > 0:
            share = max(share, math.ceil(left / max(1, r.steps - r.step_idx)))
        return share

    # ----------------------------------------------------------------------------------------------
    # commit

    def commit(self, batch: _Batch, busy: list[int], out: _StepOut) -> list[int]:
        """Each busy row takes its part of the step; returns the rows whose sequence ended."""
        return [i for k, i in enumerate(busy) if self._commit(batch.rows[i], out, k)]

    def _commit(self, r: _Row, out: _StepOut, k: int) -> bool:
        """Take row k's step; returns whether the row's sequence ended. The block-end rule is the sampler's
        (`block_end`: diffusers' `check_block_should_continue` for block_refinement, LLaDA 2.1's loop for
        llada2_editing), and so is where EOS is checked (at its commit, or at the block's end)."""
        cfg, mask = self.sampler, self.model.mask_id
        had_masks = mask in r.block
        seed_step = self.seeded and r.forwards == 0  # outside the schedule, as its own generate
        r.block = out.block[k]
        res = r.result
        res.nfe += 1
        res.row_forwards += 1
        r.forwards += 1
        r.fills.append(out.filled[k])
        r.remasks.append(out.remasked[k])
        if cfg.capture_trajectory:
            self._record(r)
        if out.remasked[k]:
            res.extra["remasked"] = res.extra.get("remasked", 0) + out.remasked[k]
        if out.edited[k]:
            res.extra["edited"] = res.extra.get("edited", 0) + out.edited[k]
        if cfg.eos_early_stop and not cfg.eos_at_block_end and self._eos_committed(r, out.changed[k]):
            r.finished = True
        if had_masks and not seed_step:
            r.step_idx += 1
        if r.finished:
            return True
        done, capped = cfg.block_end(had_masks, mask in r.block, bool(out.edited[k]), r.step_idx, r.steps, r.post_steps)
        return done and self._next_block(r, capped)

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

    def _eos_committed(self, r: _Row, changed: list[bool]) -> bool:
        """diffusers' check: an EOS among this step's commits, and the first EOS of the sequence after the prompt
        with no mask between the prompt and it."""
        eos = self.model.eos_ids
        if not any(c and t in eos for c, t in zip(changed, r.block, strict=True)):
            return False
        full = r.seq + r.block
        first = next(i for i, t in enumerate(full) if t in eos)
        return first >= r.prompt_len and self.model.mask_id not in full[r.prompt_len : first]

    def _next_block(self, r: _Row, capped: bool) -> bool:
        """The block is final: append it; the row ends at its last block or a stop string, else opens the next."""
        res = r.result
        res.steps_per_canvas.append(r.forwards)
        res.accepted_per_step.append(r.fills)
        res.renoised_per_step.append(r.remasks)
        res.step_cap_hits += int(capped)
        if res.ttft_s is None and len(r.seq) + len(r.block) > r.prompt_len:
            res.ttft_s = time.perf_counter() - r.admitted
        r.seq = r.seq + r.block
        r.step_idx = r.post_steps = r.forwards = 0
        r.fills, r.remasks = [], []
        if len(r.seq) >= r.end:
            return True
        if self.sampler.eos_early_stop and self.sampler.eos_at_block_end:
            if any(t in self.model.eos_ids for t in r.seq[r.prompt_len :]):  # LLaDA 2.1's check: the block is full
                return True
        r.block = [self.model.mask_id] * min(r.width, r.end - len(r.seq))
        self._plan(r)
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
