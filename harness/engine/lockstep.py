"""The lockstep decode path (`sampler.random_stream=reference`): transformers' `generate()`, call for call.

Every row of a batch denoises the same canvas index at the same step from one global RNG stream, finished rows stay
computed but frozen, and the batch commits together, as `generate()` does; so a run reproduces it token for token
(tests/test_decode_parity.py). `harness.engine.decode.BlockDiffusionDecoder` mixes this in and takes this path for
`random_stream=reference`: the same loop (`harness.engine.loop`) in lockstep order; its continuous order is
everything else. The contexts are the model's `prefill_whole` state: the whole prompt in one forward into
transformers' own cache, as `generate()` keeps it (`models.cache.reference_context`), so the logits are
`generate()`'s bit for bit past one canvas and past the window.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch

from contract.records import GenerationRequest, GenerationResult
from harness.engine import loop
from samplers.draw import draw_reference
from samplers.sampler_step import GlobalNoise, UniformStepIn, torch_sampling, uniform_step


@dataclass
class LockstepBatch:
    """One whole batch in lockstep: its rows, `generate()`'s cache, which rows are done, the canvas index."""

    rows: list = field(default_factory=list)
    state: Any = None
    done: list[bool] = field(default_factory=list)
    canvases: int = 0  # canvases committed so far
    max_canvases: int = 0
    started: float = 0.0

    def busy(self) -> list[int]:
        return list(range(len(self.rows)))


class LockstepSteps:
    """admit (a whole batch, the prompts in one forward) -> step (one canvas for every row) -> commit (the
    canvas kept, re-encoded as `generate()` pads it) -> retire (every row, once all are done)."""

    def __init__(self, decoder: LockstepDecoding):
        self.d = decoder

    def admit(self, batch: LockstepBatch, queue: Iterator[GenerationRequest], batch_size: int) -> None:
        if batch.rows:
            return
        requests = list(islice(queue, batch_size))
        if not requests:
            return
        batch.started = time.perf_counter()
        batch.rows = [self.d._start(r) for r in requests]
        batch.state = self.d.model.prefill_whole([r.prompt_ids for r in requests])  # generate()'s cache
        batch.done, batch.canvases = [False] * len(requests), 0
        batch.max_canvases = -(-max(r.max_new_tokens for r in requests) // self.d.canvas_length)

    def pack(self, batch: LockstepBatch) -> None:
        """Lockstep rows never move: finished rows stay computed but frozen, as in `generate()`."""

    def step(self, batch: LockstepBatch, busy: list[int]) -> torch.Tensor:
        if batch.canvases:
            for i, row in enumerate(batch.rows):
                if not batch.done[i]:
                    self.d._open_canvas(row.result)
        canvas = self.d._lockstep_canvas(batch.state, batch.done, batch.rows)
        if batch.canvases == 0:  # the first committed canvas of every row
            read_at = time.perf_counter()
            for row in batch.rows:
                row.result.ttft_s = read_at - row.admitted
        return canvas

    def commit(self, batch: LockstepBatch, busy: list[int], canvas: torch.Tensor) -> list[int]:
        """Rows keep the canvas; all leave once every row is done (or the last canvas ran), else the canvas is
        re-encoded: rows done earlier commit pads, rows ending here pad after their EOS, as `generate()`."""
        was_done, done = list(batch.done), batch.done
        host = canvas.tolist()
        for i, row in enumerate(batch.rows):
            if not done[i]:
                row.outputs.extend(host[i])
                done[i] = self.d._ended(row)
        if all(done) or batch.canvases == batch.max_canvases - 1:
            return busy
        model = self.d.model
        pad = torch.tensor(was_done, device=canvas.device)[:, None] | (
            torch.tensor(done, device=canvas.device)[:, None] & self.d._after_eos(canvas)
        )
        batch.state = model.commit(batch.state, canvas.masked_fill(pad, model.pad_id))
        for i, row in enumerate(batch.rows):
            row.result.encoder_forwards += int(not done[i])
        batch.canvases += 1
        return []

    def retire(
        self, batch: LockstepBatch, busy: list[int], leaving: list[int], t0: float, read: Any
    ) -> Iterator[GenerationResult]:
        if not leaving:
            return
        now, b = time.perf_counter(), len(batch.rows)
        for row in batch.rows:
            res = self.d._finish(row, now)
            res.wall_time_s = (now - batch.started) / b
            yield res
        batch.rows, batch.state = [], None


class LockstepDecoding:
    """The loop's lockstep ordering (`harness.engine.loop.run` over the steps below): a batch is admitted only when
    the previous one has left, every row steps until the last one is done, and they all leave together.
    Needs the decoder's `model`, `sampler`, `canvas_length` and its row helpers (`_start`, `_open_canvas`,
    `_ended`, `_finish`)."""

    def _lockstep(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        return loop.run(LockstepSteps(self), LockstepBatch(), requests, batch_size)

    def _after_eos(self, canvas: torch.Tensor) -> torch.Tensor:
        """Positions strictly after the first EOS of each row (padded before re-encoding, as generate() does)."""
        is_eos = torch.isin(canvas, torch.tensor(sorted(self.model.eos_ids), device=canvas.device))
        cum = is_eos.long().cumsum(-1)
        return (cum > 0) & ~((cum == 1) & is_eos)

    def _lockstep_canvas(self, state, done: list[bool], rows: list) -> torch.Tensor:
        """One canvas for the whole batch with the global RNG; finished rows stay computed but frozen."""
        cfg, model, c = self.sampler, self.model, self.canvas_length
        b, dev = len(rows), model.device
        canvas = torch.randint(0, model.vocab_size, (b, c), device=dev)
        argmax, sc = canvas, None
        finished = torch.zeros(b, dtype=torch.bool, device=dev)
        history = torch.full((cfg.stability_steps, b, c), -1, dtype=torch.long, device=dev)
        masks = model.canvas_masks(state, c, b)  # the state may hold more rows (a compiled step's bucket)
        stopped = [False] * b
        noise, sample = GlobalNoise(b, model.vocab_size, dev), torch_sampling(draw_reference)
        for step in range(cfg.max_steps):
            x = model.denoise(state, canvas, masks, sc if cfg.self_conditioning else None)
            temps = cfg.temperatures(torch.full((b,), step))  # host-known
            frozen = finished
            inp = UniformStepIn(
                x,
                temps.to(dev),
                model.softcap,
                torch.full((b,), step, device=dev),
                noise,
                canvas,
                history,
                finished,
                argmax,
            )
            out = uniform_step(cfg, sample, inp)  # x now holds the processed logits
            keep, new_canvas, new_argmax, history = out.keep, out.canvas, out.argmax, out.history
            if cfg.adaptive_stop:
                finished = out.finished
                if sc is not None:  # rows that already stopped keep their self-conditioning logits
                    x = torch.where(frozen[:, None, None], sc, x)
            kept = out.kept.tolist()
            entropy = out.mean_entropy.tolist() if cfg.capture_trajectory else None
            accepted = keep.tolist() if cfg.capture_trajectory else None
            for i, row in enumerate(rows):
                res = row.result
                res.row_forwards += 1
                if done[i] or stopped[i]:
                    continue
                res.nfe += 1
                res.steps_per_canvas[-1] += 1
                res.accepted_per_step[-1].append(kept[i])
                res.renoised_per_step[-1].append(c - kept[i])
                if entropy is not None:
                    res.trajectory = res.trajectory or []
                    res.trajectory.append(
                        {
                            "canvas": len(res.steps_per_canvas) - 1,
                            "step": step,
                            "argmax": new_argmax[i].tolist(),
                            "mean_entropy": entropy[i],
                            "temperature": temps[i].item(),
                            "accepted": [p for p, k in enumerate(accepted[i]) if k],
                            "tokens": new_canvas[i].tolist(),
                        }
                    )
            canvas, argmax, sc = new_canvas, new_argmax, x.to(model.dtype)
            stopped = finished.tolist()
            if all(stopped):
                break
        for i, row in enumerate(rows):
            if not done[i] and not stopped[i]:
                row.result.step_cap_hits += 1
        return argmax
