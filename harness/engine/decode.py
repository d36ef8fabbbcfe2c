"""The block-diffusion decode engine: requests stream in, finished samples stream out.

    admit queued requests into free batch rows (prefill into the rows' own slots of the shared cache)
    -> every step, for every row: denoise -> softcap + temperature -> draw -> accept (+remask)
       -> re-noise the rest -> adaptive stop
    -> a row whose canvas stopped commits it (re-encodes it into the cache) and starts the next canvas
       on the very next step (under `model.compile=step` the re-encode runs inside that step's forward,
       `WholeStep.with_commit`: the weights are read once for both); a row whose sequence ended (EOS / stop
       string / length) leaves the batch and its result is yielded at once, and a queued request takes its place.
    (`sampler.verify`: the commit's forward also verifies the canvas against the same weights' AR mode, which
     keeps the agreed prefix and the AR token after it: self-speculative / routed decoding,
     harness.engine.canvas_verify)

Rows are the cache's slot rows (`models.cache.slot_cache`): admitting, committing and releasing a row write only its
new K/V and move no other row's. A step computes rows 0 up to the highest one in flight; a freed row is
refilled on the next step, so every computed row does useful work (`row_utilization` 1.0) whatever the spread
of step counts. Once no request is left to refill them, the last rows are packed down into the freed rows
(one row's K/V copied per leaving row, `SlotCache.bytes_moved`), so the end of a run computes no free rows.
Per step the host reads the device once (finished flags, accepted counts and the argmax canvas, one
small packed tensor; with `sampler.stream_after_stable`, each row's stable prefix length too:
`harness.engine.stable_stream`): steps, temperatures and random-stream keys are known on the host already. Every
random number is a pure function of (sample seed, canvas, step, position, stream) (`samplers.streams`),
so a sample's random numbers do not depend on its batch, its neighbours, when it was admitted, or a resume;
its logits do, by the rounding of batch-shaped kernels (what that changes: docs/reproducibility.md).
The only full-size tensor is one float32 logits workspace (B x C x V; the model dtype under `model.compile=step`,
where it only feeds self-conditioning): the LM head writes into it,
softcap and temperature run in place, the draw reads it in cache-sized blocks, and it is the next
step's self-conditioning input (`make bench` measures the extra memory in units of that tensor).

The loop is named steps (admit, pack, step, tally, commit, retire) over `harness.engine.rows`' `Row`s and `Batch`:
another decoder family can run it with its own `_step` / `_commit`.

`random_stream=reference` runs a lockstep variant instead: whole batches, transformers' global-RNG call
order and its freezing of finished rows, which reproduces `generate()` token for token (a parity tool:
it computes finished rows, so its utilization is below 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

import torch

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, StreamEvent, check_request
from contract.text import cut_at_stop
from harness.engine import loop
from harness.engine.canvas_verify import sampling_of, verify_canvases, wants_verify
from harness.engine.lockstep import LockstepDecoding
from harness.engine.rows import Batch, LogitsWorkspace, Row, StepRead, Stops
from harness.engine.stable_stream import StableRuns, StableStream
from models.cache.slot_cache import bucket
from samplers import streams
from samplers.config import SamplerConfig
from samplers.draw import StepDraw, draw_exact
from samplers.fast_draw import draw_fast
from samplers.sampler_step import sampler_step, torch_sampling


def fused_sampling(processed_out: torch.Tensor):
    """`sample(...)` through the fused Triton kernel: one read of the raw logits; the processed logits (the
    next step's self-conditioning input) are written to `processed_out` (B_max, C, V), in the model dtype."""
    from samplers.triton_draw import fused_draw

    def sample(x: torch.Tensor, temperature: torch.Tensor, softcap: float | None, u: torch.Tensor) -> StepDraw:
        b, c, v = x.shape
        out = fused_draw(
            x.reshape(b * c, v),
            temperature.repeat_interleave(c),
            u.reshape(-1),
            softcap,
            processed_out[:b].view(b * c, v),
        )
        return StepDraw(*(t.view(b, c) for t in out))

    return sample


def _triton() -> bool:
    from samplers.triton_draw import available

    return available()


class BlockDiffusionDecoder(LockstepDecoding):
    """`contract.decoding.Decoder` over a `contract.decoding.BlockDiffusionAdapter` (`models.diffusion_gemma`)."""

    label = DecoderKind.DIFFUSION

    def __init__(self, model, sampler: SamplerConfig):
        self.model, self.sampler = model, sampler
        if sampler.verify != "off":  # hybrid decoding: a series of its own on the fronts
            self.label = DecoderKind.SELF_SPECULATIVE if sampler.verify == "always" else DecoderKind.ROUTED
        self.tokenizer = model.tokenizer
        self.canvas_length = sampler.canvas_length or model.canvas_length
        self.resumable = sampler.random_stream != "reference"
        self.why_not_resumable = "random_stream=reference draws from one global stream per run"
        # `model.compile=step`: one compiled graph per step and batch bucket (its draw is `draw_whole`, in the graph)
        self._whole = self._commit_graph = None
        if getattr(model, "whole_step", False):  # and one compiled graph per commit bucket
            from harness.engine.commit_graph import WholeCommit
            from harness.engine.step_graph import WholeStep

            mode = "reduce-overhead" if model.device.type == "cuda" else None  # replayed as CUDA graphs there
            self._whole = WholeStep(model, sampler, mode=mode)
            self._commit_graph = WholeCommit(model, mode=mode)
        # a commit folds into the next step's forward (one read of the weights for both) where the model allows it
        self._fold = self._whole is not None and self._whole.folds
        self.fused = self._whole is None and (
            sampler.draw == "fused" or (sampler.draw == "fast" and model.device.type == "cuda" and _triton())
        )
        if sampler.draw == "fused" and not _triton():
            raise ValueError("sampler.draw=fused needs Triton and a CUDA device (or TRITON_INTERPRET=1 for tests)")
        self._draw = draw_exact if sampler.draw == "exact" else draw_fast

    def encode(self, prompt) -> list[int]:
        return self.model.encode(prompt)

    def describe(self) -> dict:
        return {
            **self.model.describe(),
            "label": self.label,
            "sampler": self.sampler.knobs(),
            "canvas_length": self.canvas_length,
        }

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Decode a list together; results in request order."""
        out = {r.sample_id: r for r in self.stream(requests, batch_size=max(1, len(requests)))}
        return [out[r.sample_id] for r in requests]

    @torch.no_grad()
    def stream(
        self,
        requests: Iterable[GenerationRequest],
        batch_size: int,
        on_visible: Callable[[StreamEvent], None] | None = None,
    ) -> Iterator[GenerationResult]:
        """Decode with at most `batch_size` rows in flight; yield each result the moment it finishes.

        With `sampler.stream_after_stable` set, `on_visible` gets each change of a sample's visible output
        (`harness.engine.stable_stream`); the tokens decoded are the same with or without it."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if on_visible is not None and not self.sampler.streaming:
            raise ValueError("on_visible needs sampler.stream_after_stable >= 1 (what has been stable for S steps)")
        if self.sampler.random_stream == "reference":
            yield from self._lockstep(requests, batch_size)
        else:
            yield from self._continuous(requests, batch_size, on_visible)

    # ----------------------------------------------------------------------------------------------
    # continuous batching (default)

    def _continuous(
        self, requests: Iterable[GenerationRequest], batch_size: int, on_visible=None
    ) -> Iterator[GenerationResult]:
        """Rows are slot rows of the cache: a request keeps its row until it ends (or, once the queue is empty,
        is packed down into a freed row), and a step computes rows 0 up to the highest one in flight. The loop is
        `harness.engine.loop.run` over the steps below: admit -> pack -> step (forward, draw, the one host read)
        -> commit (tally, then re-encode stopped canvases) -> retire."""
        return loop.run(self, self._open_batch(on_visible), requests, batch_size)

    def _open_batch(self, on_visible) -> Batch:
        cfg, model, c, dev = self.sampler, self.model, self.canvas_length, self.model.device
        workspace = model.dtype if self._whole is not None else torch.float32
        logits = LogitsWorkspace(c, model.vocab_size, dev, model.dtype if self.fused else None, workspace)
        return Batch(
            canvas=torch.empty((0, c), dtype=torch.long, device=dev),
            history=torch.full((cfg.stability_steps, 0, c), -1, dtype=torch.long, device=dev),
            logits=logits,
            sample=fused_sampling(logits.sc) if self.fused else torch_sampling(self._draw),
            # sampler.stream_after_stable: built only when on, so a run that does not stream does none of it
            stable=StableRuns(cfg.stream_after_stable, c, dev) if cfg.streaming else None,
            visible=StableStream(model.eos_ids, on_visible) if cfg.streaming else None,
        )

    def admit(self, batch: Batch, queue: Iterator[GenerationRequest], batch_size: int) -> None:
        """Queued requests take the free rows: prefilled into those rows' slots, each with its first canvas."""
        model, c = self.model, self.canvas_length
        free = [i for i in range(batch_size) if i >= len(batch.rows) or batch.rows[i] is None]  # not a bucket's pad
        new = [] if batch.exhausted else [self._start(r) for r in islice(queue, len(free))]
        batch.exhausted = batch.exhausted or len(new) < len(free)
        if not new:
            return
        at = free[: len(new)]
        if batch.state is None:
            batch.state = model.open(min(batch_size, len(new)) if batch.exhausted else batch_size, c)
        grow = max(-(-r.req.max_new_tokens // c) * c for r in new)
        batch.state = model.prefill([r.req.prompt_ids for r in new], batch.state, at, grow=grow)
        top = max(at) + 1
        batch.grow(top if self._whole is None else bucket(top))  # a compiled step's padding rows are free rows
        batch.place(at, new, self._init_canvas(new))

    def pack(self, batch: Batch) -> None:
        """No request left to refill freed rows: pack the last rows down, so steps stop computing free rows."""
        while batch.exhausted and (move := batch.packing_move()):
            if batch.pending is not None:  # the rows move with their committed contexts: commit them first
                self._settle(batch, self._commit_graph(batch.state, batch.pending[1], batch.pending[0]))
            batch.state = self.model.move(batch.state, *move)
            batch.move(*move)

    def step(self, batch: Batch, busy: list[int]) -> StepRead:
        """One denoising step of rows 0..b-1 (forward, softcap + temperature, draw, accept, re-noise, adaptive
        stop), then the step's one device read."""
        cfg, model, c, dev = self.sampler, self.model, self.canvas_length, self.model.device
        b = busy[-1] + 1 if self._whole is None else bucket(busy[-1] + 1)
        if batch.logits.capacity < b:
            batch.logits.grow(b)
            batch.sample = fused_sampling(batch.logits.sc) if self.fused else batch.sample
        if batch.masks is None and self._whole is None:  # rows were admitted, committed or released
            batch.masks = model.canvas_masks(batch.state, c, b)
        keys = batch.keys(b)  # host-known: copied to the device, never read back
        temps = cfg.temperatures(keys[2])  # host-known
        out = self._forward(batch, b, keys.to(dev), temps.to(dev))
        if cfg.verify != "off":  # a pinned position 0 keeps its (already emitted) AR token
            pin = batch.pins(b)
            out.canvas[:, 0] = torch.where(pin >= 0, pin, out.canvas[:, 0])  # host-known, as the keys
            out.argmax[:, 0] = torch.where(pin >= 0, pin, out.argmax[:, 0])
        batch.canvas[:b], batch.history[:, :b] = out.canvas, out.history
        parts = [out.finished.long()[:, None], out.kept[:, None], out.argmax]
        if cfg.capture_trajectory:  # the accepted mask and the kept tokens ride in the same read
            parts += [out.keep.long(), out.canvas.long()]
        if batch.stable is not None:  # and so does each row's stable prefix length
            parts.append(batch.stable.update(out.keep, out.argmax)[:, None])
        host = torch.cat(parts, dim=1).cpu().tolist()  # the one device read of the step
        at = time.perf_counter()  # a canvas that stopped in this step is final from here on
        entropies = out.mean_entropy.tolist() if cfg.capture_trajectory or cfg.verify == "step_cap" else None
        return StepRead(b, out.argmax, host, temps, entropies, at)

    def _forward(self, batch: Batch, b: int, keys: torch.Tensor, temperature: torch.Tensor):
        """The step's forward and draw: the compiled step (with the last step's folded commits), or eager."""
        model = self.model
        sc_rows, canvas, history, raw = batch.sc_rows(b), batch.canvas[:b], batch.history[:, :b], batch.logits.raw[:b]
        if self._whole is None:
            sc = batch.logits.sc[:b] if any(sc_rows) else None
            x = model.denoise(batch.state, canvas, batch.masks, sc, sc_rows, out=raw)
            return sampler_step(
                self.sampler, batch.sample, x, temperature, model.softcap, keys, canvas, history, model.vocab_size
            )
        step_args = (batch.state, canvas, history, raw, sc_rows, keys, temperature)
        if batch.pending is None:
            return self._whole(*step_args)
        out, hidden = self._whole.with_commit(*step_args, batch.pending[1], batch.pending[0])  # the last commits
        self._settle(batch, hidden)
        return out

    def _settle(self, batch: Batch, hidden: torch.Tensor) -> None:
        """The pending (folded) commits' K/V, encoded as `hidden`, enter their rows' cache."""
        at, c = batch.pending[0], self.canvas_length
        batch.state, batch.pending = self.model.advance(batch.state, at, [c] * len(at), hidden), None

    def commit(self, batch: Batch, busy: list[int], read: StepRead) -> list[int]:
        """The step's rows tallied, stopped canvases committed; returns the rows whose sequence ended."""
        stops = self._tally(batch, busy, read)
        self._commit(batch, read.argmax, stops)
        return stops.leaving

    def _tally(self, batch: Batch, busy: list[int], read: StepRead) -> Stops:
        """Each busy row's step counted; a row whose canvas stopped goes to verify, commit or leave."""
        cfg, c = self.sampler, self.canvas_length
        stops = Stops()
        batch.rows[busy[0]].result.row_forwards += read.b - len(busy)  # free rows computed this step: waste
        for i in busy:
            row, (fin, kept, *rest) = batch.rows[i], read.host[i]
            argmax = rest[:c]
            self._count(row, kept, rest, read, i)
            row.step += 1
            row.sc = cfg.self_conditioning
            if fin or row.step >= cfg.step_cap:
                self._stopped(batch, i, bool(fin), argmax, read, stops)
            elif batch.visible is not None:
                at_token = len(row.outputs)
                limit = row.req.max_new_tokens - at_token
                batch.visible.denoised(i, row.req.sample_id, at_token, argmax, rest[-1], limit, read.at)
        return stops

    def _count(self, row: Row, kept: int, rest: list[int], read: StepRead, i: int) -> None:
        """The step in the row's result (forwards, accepted / re-noised counts, the trajectory when captured)."""
        c, res = self.canvas_length, row.result
        res.nfe += 1
        res.row_forwards += 1
        res.steps_per_canvas[-1] += 1
        res.accepted_per_step[-1].append(kept)
        res.renoised_per_step[-1].append(c - kept)
        if self.sampler.capture_trajectory:
            res.trajectory = res.trajectory or []
            res.trajectory.append(
                {
                    "canvas": row.canvas_idx,
                    "step": row.step,
                    "argmax": rest[:c],
                    "mean_entropy": read.entropies[i],
                    "temperature": read.temps[i].item(),
                    "accepted": [p for p, k in enumerate(rest[c : 2 * c]) if k],
                    "tokens": rest[2 * c : 3 * c],  # the next input: accepted positions keep these
                }
            )

    def _stopped(self, batch: Batch, i: int, fin: bool, argmax: list[int], read: StepRead, stops: Stops) -> None:
        """Row i's canvas stopped: to verify (its tokens are known once the AR mode has verified them), or its
        tokens are output and the row commits the canvas or, its sequence ended, leaves."""
        cfg, row = self.sampler, batch.rows[i]
        res = row.result
        res.step_cap_hits += int(not fin)
        if cfg.verify != "off" and wants_verify(cfg, fin, row.step, read.entropies[i] if read.entropies else None):
            stops.verifying.append(i)
            row.warm = argmax  # the draft, until the verification cuts it
            return
        if res.ttft_s is None:  # the first committed canvas: its tokens can be shown
            res.ttft_s = read.at - row.admitted
        row.outputs.extend(argmax if row.pin is None else argmax[1:])  # a pinned token was emitted already
        if self._ended(row):
            stops.leaving.append(i)
            return
        stops.committing.append(i)
        if batch.visible is not None:
            batch.visible.committed(i, row.req.sample_id, len(row.outputs) - self.canvas_length, argmax, read.at)

    def _commit(self, batch: Batch, argmax: torch.Tensor, stops: Stops) -> None:
        """Stopped canvases are re-encoded into their rows' cache (folded into the next step's forward where the
        compiled step allows it; with verification, one forward that also verifies), and their rows start the
        next canvas."""
        model, c = self.model, self.canvas_length
        committing, verifying = stops.committing, stops.verifying
        for i in committing:  # committed as drafted: the next canvas is drafted freely
            batch.rows[i].pin = batch.rows[i].warm = None
        if committing and not verifying:
            if self._fold:  # re-encoded by the next step's forward, which starts their next canvases after it
                batch.pending = (list(committing), argmax[committing])
            elif self._commit_graph is None:
                batch.state = model.commit(batch.state, argmax[committing], committing)
            else:  # the same re-encode as one compiled graph
                hidden = self._commit_graph(batch.state, argmax[committing], committing)
                batch.state = model.advance(batch.state, committing, [c] * len(committing), hidden)
        elif verifying:
            self._verify(batch, argmax, stops)
        if committing:
            for i in committing:
                row = batch.rows[i]
                row.result.encoder_forwards += int(i not in verifying)  # a verify counted its own
                row.canvas_idx, row.step, row.sc = row.canvas_idx + 1, 0, False
                self._open_canvas(row.result)
            batch.restart(committing, self._init_canvas([batch.rows[i] for i in committing]))
        if committing or verifying:
            batch.masks = None

    def _verify(self, batch: Batch, argmax: torch.Tensor, stops: Stops) -> None:
        """One causal forward re-encodes every stopped canvas and verifies the drafts; a verified row then
        commits or leaves."""
        committing, verifying = stops.committing, stops.verifying
        both = committing + verifying
        encode = self.model.encode_canvas if self._commit_graph is None else self._commit_graph
        hidden = encode(batch.state, argmax[both], both)
        kept = [self.canvas_length] * len(committing)
        kept += self._verified(batch.state, argmax[verifying], hidden[len(committing) :], verifying, batch.rows)
        batch.state = self.model.advance(batch.state, both, kept, hidden)
        for i in verifying:
            (stops.leaving if self._ended(batch.rows[i]) else committing).append(i)

    def retire(
        self, batch: Batch, busy: list[int], leaving: list[int], t0: float, read: StepRead
    ) -> Iterator[GenerationResult]:
        """Ended rows release their slots and their results are yielded; the step's wall time is shared out."""
        if leaving:
            batch.state = self.model.release(batch.state, leaving)
            batch.masks = None
        now = time.perf_counter()
        for i in busy:
            batch.rows[i].result.wall_time_s += (now - t0) / len(busy)
        for i in leaving:
            row = batch.rows[i]
            res = self._finish(row, now)
            if batch.visible is not None:
                batch.visible.finished(i, res, row.admitted, read.at)
            yield res
            batch.rows[i] = None

    def _verified(self, state, canvases: torch.Tensor, hidden: torch.Tensor, at: list[int], rows: list) -> list[int]:
        """The AR mode verifies the canvases of rows `at` (`harness.engine.canvas_verify`): each row emits its accepted
        prefix and the AR token after it, which it pins for its next canvas. Returns the positions each keeps."""
        # AR logits of at most a quarter of the batch at once (float32 plus their model-dtype source: <= 0.375 U),
        # beside the 1 U logits workspace: within the 1.5 U of the memory plan (models.planning.memory)
        group = max(1, len(rows) // 4)
        pins, seeds = [rows[i].pin for i in at], [rows[i].req.seed for i in at]
        how = sampling_of(self.sampler)
        checked = verify_canvases(self.model, state, canvases, hidden, at, pins, seeds, how, group)
        read_at = time.perf_counter()
        for i, v in zip(at, checked, strict=True):
            row, res = rows[i], rows[i].result
            res.nfe += 1  # the verify forward is a forward of the same weights: it counts (one TPF rule)
            res.encoder_forwards += 1
            res.row_forwards += 1
            res.extra.setdefault("accepted_per_verify", []).append(v.accepted)
            if res.ttft_s is None:
                res.ttft_s = read_at - row.admitted
            row.outputs.extend(v.emitted)
            # the next canvas starts at draft position `kept` (the pin); the draft after it is its warm start
            row.pin, row.warm = v.pin, row.warm[v.kept + 1 :]
        return [v.kept for v in checked]

    def _ended(self, row: Row) -> bool:
        """EOS, a stop string or the length cap in the row's output so far."""
        _, _, reason = cut_at_stop(self.tokenizer, row.outputs, self.model.eos_ids, row.req.stop_strings)
        return reason != "length" or len(row.outputs) >= row.req.max_new_tokens

    def _start(self, req: GenerationRequest) -> Row:
        check_request(req)
        res = GenerationResult(req.sample_id, [], "", 0, encoder_forwards=1, prompt_tokens=len(req.prompt_ids))
        self._open_canvas(res)
        return Row(req, res, admitted=time.perf_counter())

    @staticmethod
    def _open_canvas(res: GenerationResult) -> None:
        res.steps_per_canvas.append(0)
        res.accepted_per_step.append([])
        res.renoised_per_step.append([])

    def _init_canvas(self, rows: list[Row]) -> torch.Tensor:
        dev = self.model.device
        seed = torch.tensor([r.req.seed for r in rows], dtype=torch.long, device=dev)
        canvas_idx = torch.tensor([r.canvas_idx for r in rows], dtype=torch.long, device=dev)
        zero = torch.zeros_like(seed)
        x = streams.tokens(seed, canvas_idx, zero, self.canvas_length, self.model.vocab_size, streams.INIT)
        for i, r in enumerate(rows):  # verification: the emitted AR token, then the rest of the rejected draft
            if r.pin is not None:
                x[i, : 1 + len(r.warm)] = torch.tensor([r.pin, *r.warm], device=dev)
        return x

    def _finish(self, row: Row, now: float) -> GenerationResult:
        req, res = row.req, row.result
        toks, text, reason = cut_at_stop(
            self.tokenizer, row.outputs[: req.max_new_tokens], self.model.eos_ids, req.stop_strings
        )
        res.token_ids = [t for t in toks if t != self.model.pad_id]  # TPF counts non-pad tokens (as generate())
        res.text, res.finished_by = text, reason
        res.latency_s = now - row.admitted
        return res
