"""The lockstep decode path (`sampler.random_stream=reference`): transformers' `generate()`, call for call.

Every row of a batch denoises the same canvas index at the same step from one global RNG stream, finished rows stay
computed but frozen, and the batch commits together, as `generate()` does; so a run reproduces it token for token
(tests/test_decode_parity.py). `harness.engine.decode.BlockDiffusionDecoder` mixes this in and takes this path for
`random_stream=reference`; its continuous-batching path is everything else. The contexts are the model's
`prefill_whole` state: the whole prompt in one forward into transformers' own cache, as `generate()` keeps it
(`models.cache.reference_context`), so the logits are `generate()`'s bit for bit past one canvas and past the window.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from itertools import islice

import torch

from contract.records import GenerationRequest, GenerationResult
from samplers.draw import draw_reference
from samplers.sampler_step import process_logits


class LockstepDecoding:
    """Needs the decoder's `model`, `sampler`, `canvas_length` and its row helpers (`_start`, `_open_canvas`,
    `_ended`, `_finish`)."""

    def _lockstep(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        it = iter(requests)
        while batch := list(islice(it, batch_size)):
            yield from self._lockstep_batch(batch)

    def _lockstep_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        t0 = time.perf_counter()
        model, c = self.model, self.canvas_length
        rows = [self._start(r) for r in requests]
        b = len(rows)
        state = model.prefill_whole([r.prompt_ids for r in requests])  # generate()'s cache, one forward
        done = [False] * b
        max_canvases = -(-max(r.max_new_tokens for r in requests) // c)
        for k in range(max_canvases):
            if k:
                for i in range(b):
                    if not done[i]:
                        self._open_canvas(rows[i].result)
            canvas = self._lockstep_canvas(state, done, rows)
            if k == 0:  # the first committed canvas of every row
                read_at = time.perf_counter()
                for row in rows:
                    row.result.ttft_s = read_at - row.admitted
            was_done = list(done)
            host = canvas.tolist()
            for i, row in enumerate(rows):
                if not done[i]:
                    row.outputs.extend(host[i])
                    done[i] = self._ended(row)
            if all(done) or k == max_canvases - 1:
                break
            # as generate(): rows done earlier commit pads, rows ending here pad after their EOS
            pad = torch.tensor(was_done, device=canvas.device)[:, None] | (
                torch.tensor(done, device=canvas.device)[:, None] & self._after_eos(canvas)
            )
            state = model.commit(state, canvas.masked_fill(pad, model.pad_id))
            for i in range(b):
                rows[i].result.encoder_forwards += int(not done[i])
        now = time.perf_counter()
        results = []
        for row in rows:
            res = self._finish(row, now)
            res.wall_time_s = (now - t0) / b
            results.append(res)
        return results

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
        for step in range(cfg.max_steps):
            x = model.denoise(state, canvas, masks, sc if cfg.self_conditioning else None)
            temps = cfg.temperatures(torch.full((b,), step))  # host-known
            x = process_logits(x, model.softcap, temps.to(dev))
            d = draw_reference(x)
            keep = cfg.remask(cfg.accept(d, torch.full((b,), step, device=dev)), d.confidence)
            new_canvas = torch.where(keep, d.sampled, torch.randint(0, model.vocab_size, (b, c), device=dev))
            new_argmax = d.argmax
            if cfg.adaptive_stop:  # rows that already stopped keep their canvas, argmax and logits
                new_argmax = torch.where(finished[:, None], argmax, new_argmax)
                new_canvas = torch.where(finished[:, None], canvas, new_canvas)
                if sc is not None:
                    x = torch.where(finished[:, None, None], sc, x)
                if cfg.stability_steps == 0:
                    stable = torch.ones(b, dtype=torch.bool, device=dev)
                else:
                    stable = (history == new_argmax[None]).all(-1).all(0)
                    history = torch.cat([history[1:], new_argmax[None]])
                finished = finished | (stable & (d.entropy.mean(-1) < cfg.stop_entropy))
            kept = keep.sum(-1).tolist()
            entropy = d.entropy.mean(-1).tolist() if cfg.capture_trajectory else None
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
