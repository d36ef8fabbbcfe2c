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

Rows are the cache's slot rows (`models.slot_cache`): admitting, committing and releasing a row write only its
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

`random_stream=reference` runs a lockstep variant instead: whole batches, transformers' global-RNG call
order and its freezing of finished rows, which reproduces `generate()` token for token (a parity tool:
it computes finished rows, so its utilization is below 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

import torch

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, StreamEvent, check_request
from contract.text import cut_at_stop
from harness.engine.canvas_verify import sampling_of, verify_canvases, wants_verify
from harness.engine.lockstep import LockstepDecoding
from harness.engine.stable_stream import StableRuns, StableStream
from models.slot_cache import bucket
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


class _Logits:
    """The step's full-size logits buffers, allocated once per decode and reused every step.

    Torch path: one float32 (B, C, V) tensor: the LM head writes the raw logits into it, softcap and
    temperature run in place, and it is the next step's self-conditioning input (`sc` is `raw`).
    Fused path: `raw` in the model dtype plus `sc` in the model dtype, which the kernel writes while it
    reads `raw` (the next forward reads `sc` before the LM head overwrites `raw`).
    Compiled step (`dtype` = the model's): one tensor that only carries the processed logits to the next step's
    self-conditioning, which casts them to the model dtype first (as transformers does): stored in that dtype,
    the same values at half the bytes of float32."""

    def __init__(
        self,
        c: int,
        v: int,
        device: torch.device,
        fused_dtype: torch.dtype | None,
        dtype: torch.dtype = torch.float32,
    ):
        self.shape, self.device, self.fused_dtype, self.dtype = (c, v), device, fused_dtype, dtype
        self.raw = self.sc = torch.empty(0, c, v, dtype=dtype, device=device)
        self.capacity = 0

    def grow(self, b: int) -> None:
        """Grow to `b` rows (only while the first rows are admitted; later admissions refill freed rows)."""
        old_sc = self.sc
        self.raw = torch.empty(b, *self.shape, dtype=self.fused_dtype or self.dtype, device=self.device)
        fused = self.fused_dtype is not None
        self.sc = torch.empty(b, *self.shape, dtype=self.fused_dtype, device=self.device) if fused else self.raw
        self.sc[: old_sc.shape[0]].copy_(old_sc)
        self.capacity = b


@dataclass
class _Row:
    """Host-side state of one batch row (one request in flight)."""

    req: GenerationRequest
    result: GenerationResult
    admitted: float
    canvas_idx: int = 0
    step: int = 0
    outputs: list[int] = field(default_factory=list)
    pin: int | None = None  # verification: the emitted AR token this canvas holds at position 0
    warm: list[int] | None = None  # verification: the rejected draft's tokens after the pin, this canvas's start


def _packing_move(rows: list) -> tuple[int, int] | None:
    """(highest busy row, lowest free row below it), or None when the busy rows are 0..k-1 already."""
    busy = [i for i, r in enumerate(rows) if r is not None]
    free = [i for i, r in enumerate(rows) if r is None]
    if busy and free and free[0] < busy[-1]:
        return busy[-1], free[0]
    return None


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
        is packed down into a freed row), and a step computes rows 0 up to the highest one in flight."""
        cfg, model, c, v = self.sampler, self.model, self.canvas_length, self.model.vocab_size
        dev = model.device
        queue = iter(requests)
        rows: list[_Row | None] = []
        state = masks = None
        canvas = torch.empty((0, c), dtype=torch.long, device=dev)
        history = torch.full((cfg.stability_steps, 0, c), -1, dtype=torch.long, device=dev)
        workspace = model.dtype if self._whole is not None else torch.float32
        logits = _Logits(c, v, dev, model.dtype if self.fused else None, workspace)
        verifying_on = cfg.verify != "off"
        sample = fused_sampling(logits.sc) if self.fused else torch_sampling(self._draw)
        sc_rows: list[bool] = []
        exhausted = False
        pending: tuple[list[int], torch.Tensor] | None = None  # rows and canvases whose commit folds into the next step
        # sampler.stream_after_stable: built only when on, so a run that does not stream does none of it
        stable = StableRuns(cfg.stream_after_stable, c, dev) if cfg.streaming else None
        visible = StableStream(model.eos_ids, on_visible) if cfg.streaming else None
        while True:
            t0 = time.perf_counter()
            free = [i for i in range(batch_size) if i >= len(rows) or rows[i] is None]  # not a bucket's padding
            new = [] if exhausted else [self._start(r) for r in islice(queue, len(free))]
            exhausted = exhausted or len(new) < len(free)
            if new:
                at = free[: len(new)]
                if state is None:
                    state = model.open(min(batch_size, len(new)) if exhausted else batch_size, c)
                grow = max(-(-r.req.max_new_tokens // c) * c for r in new)
                state = model.prefill([r.req.prompt_ids for r in new], state, at, grow=grow)
                top = max(at) + 1
                if self._whole is not None:  # a compiled step runs a bucket of rows: the padding rows are free
                    top = bucket(top)
                if top > len(rows):  # the first admissions: the per-row buffers grow to the rows in use
                    extra = top - len(rows)
                    rows += [None] * extra
                    sc_rows += [False] * extra
                    canvas = torch.cat([canvas, torch.zeros((extra, c), dtype=torch.long, device=dev)])
                    history = torch.cat([history, torch.full((cfg.stability_steps, extra, c), -1, device=dev)], 1)
                    if stable is not None:
                        stable.grow(extra)
                idx = torch.tensor(at, device=dev)
                canvas = canvas.index_copy(0, idx, self._init_canvas(new))
                history = history.index_fill(1, idx, -1)
                if stable is not None:
                    stable.reset(idx)
                for i, row in zip(at, new, strict=True):
                    rows[i], sc_rows[i] = row, False
                    if visible is not None:
                        visible.open(row.req.sample_id)
                masks = None
            # no request left to refill freed rows: pack the last rows down, so steps stop computing free rows
            while exhausted and (move := _packing_move(rows)):
                if pending is not None:  # the rows move with their committed contexts: commit them first
                    hidden = self._commit_graph(state, pending[1], pending[0])
                    state, pending = model.advance(state, pending[0], [c] * len(pending[0]), hidden), None
                src, dst = move
                state = model.move(state, src, dst)
                canvas[dst], history[:, dst] = canvas[src], history[:, src]
                if stable is not None:
                    stable.move(src, dst)
                if sc_rows[src]:
                    logits.sc[dst].copy_(logits.sc[src])
                rows[dst], sc_rows[dst], rows[src], sc_rows[src] = rows[src], sc_rows[src], None, False
                masks = None
            busy = [i for i, r in enumerate(rows) if r is not None]
            if not busy:
                return
            b = busy[-1] + 1 if self._whole is None else bucket(busy[-1] + 1)
            if logits.capacity < b:
                logits.grow(b)
                sample = fused_sampling(logits.sc) if self.fused else sample
            if masks is None and self._whole is None:  # rows were admitted, committed or released
                masks = model.canvas_masks(state, c, b)

            keys = torch.tensor(
                [
                    [r.req.seed if r else 0 for r in rows[:b]],
                    [r.canvas_idx if r else 0 for r in rows[:b]],
                    [r.step if r else 0 for r in rows[:b]],
                ],
                dtype=torch.long,
            )  # host-known: copied to the device, never read back
            temps = cfg.temperatures(keys[2])  # host-known
            temperature = temps.to(dev)
            keys = keys.to(dev)
            if self._whole is not None:
                step_args = (state, canvas[:b], history[:, :b], logits.raw[:b], sc_rows[:b], keys, temperature)
                if pending is None:
                    out = self._whole(*step_args)
                else:  # the last step's commits, in this step's forward
                    out, hidden = self._whole.with_commit(*step_args, pending[1], pending[0])
                    state, pending = model.advance(state, pending[0], [c] * len(pending[0]), hidden), None
            else:
                sc = logits.sc[:b] if any(sc_rows[:b]) else None
                x = model.denoise(state, canvas[:b], masks, sc, sc_rows[:b], out=logits.raw[:b])
                out = sampler_step(cfg, sample, x, temperature, model.softcap, keys, canvas[:b], history[:, :b], v)
            if verifying_on:  # a pinned position 0 keeps its (already emitted) AR token
                pin = torch.tensor([-1 if r is None or r.pin is None else r.pin for r in rows[:b]], device=dev)
                out.canvas[:, 0] = torch.where(pin >= 0, pin, out.canvas[:, 0])  # host-known, as the keys
                out.argmax[:, 0] = torch.where(pin >= 0, pin, out.argmax[:, 0])
            canvas[:b], history[:, :b] = out.canvas, out.history
            parts = [out.finished.long()[:, None], out.kept[:, None], out.argmax]
            if cfg.capture_trajectory:  # the accepted mask and the kept tokens ride in the same read
                parts += [out.keep.long(), out.canvas.long()]
            if stable is not None:  # and so does each row's stable prefix length
                parts.append(stable.update(out.keep, out.argmax)[:, None])
            host = torch.cat(parts, dim=1).cpu().tolist()  # the one device read of the step
            read_at = time.perf_counter()  # a canvas that stopped in this step is final from here on
            entropies = out.mean_entropy.tolist() if cfg.capture_trajectory or cfg.verify == "step_cap" else None
            trajectory = entropies if cfg.capture_trajectory else None

            leaving, committing, verifying = [], [], []
            rows[busy[0]].result.row_forwards += b - len(busy)  # free rows computed this step: waste
            for i in busy:
                row, (fin, kept, *rest) = rows[i], host[i]
                argmax = rest[:c]
                res = row.result
                res.nfe += 1
                res.row_forwards += 1
                res.steps_per_canvas[-1] += 1
                res.accepted_per_step[-1].append(kept)
                res.renoised_per_step[-1].append(c - kept)
                if trajectory is not None:
                    res.trajectory = res.trajectory or []
                    res.trajectory.append(
                        {
                            "canvas": row.canvas_idx,
                            "step": row.step,
                            "argmax": argmax,
                            "mean_entropy": trajectory[i],
                            "temperature": temps[i].item(),
                            "accepted": [p for p, k in enumerate(rest[c : 2 * c]) if k],
                            "tokens": rest[2 * c : 3 * c],  # the next input: accepted positions keep these
                        }
                    )
                row.step += 1
                sc_rows[i] = cfg.self_conditioning
                if not fin and row.step < cfg.step_cap:
                    if visible is not None:
                        at_token = len(row.outputs)
                        limit = row.req.max_new_tokens - at_token
                        visible.denoised(i, row.req.sample_id, at_token, argmax, rest[-1], limit, read_at)
                    continue
                res.step_cap_hits += int(not fin)
                if verifying_on and wants_verify(cfg, bool(fin), row.step, entropies[i] if entropies else None):
                    verifying.append(i)  # its tokens are known once the AR mode has verified them
                    row.warm = argmax  # the draft, until the verification cuts it
                    continue
                if res.ttft_s is None:  # the first committed canvas: its tokens can be shown
                    res.ttft_s = read_at - row.admitted
                row.outputs.extend(argmax if row.pin is None else argmax[1:])  # a pinned token was emitted already
                if self._ended(row):
                    leaving.append(i)
                else:
                    committing.append(i)
                    if visible is not None:
                        visible.committed(i, row.req.sample_id, len(row.outputs) - c, argmax, read_at)

            for i in committing:  # committed as drafted: the next canvas is drafted freely
                rows[i].pin = rows[i].warm = None
            if committing and not verifying:
                if self._fold:  # re-encoded by the next step's forward, which starts their next canvases after it
                    pending = (list(committing), out.argmax[committing])
                elif self._commit_graph is None:
                    state = model.commit(state, out.argmax[committing], committing)
                else:  # the same re-encode as one compiled graph
                    hidden = self._commit_graph(state, out.argmax[committing], committing)
                    state = model.advance(state, committing, [c] * len(committing), hidden)
            elif verifying:  # one causal forward re-encodes every stopped canvas and verifies the drafts
                both = committing + verifying
                encode = model.encode_canvas if self._commit_graph is None else self._commit_graph
                hidden = encode(state, out.argmax[both], both)
                kept = [c] * len(committing)
                kept += self._verified(state, out.argmax[verifying], hidden[len(committing) :], verifying, rows)
                state = model.advance(state, both, kept, hidden)
                del hidden
                for i in verifying:
                    (leaving if self._ended(rows[i]) else committing).append(i)
            if committing:
                for i in committing:
                    row = rows[i]
                    row.result.encoder_forwards += int(i not in verifying)  # a verify counted its own
                    row.canvas_idx, row.step = row.canvas_idx + 1, 0
                    self._open_canvas(row.result)
                    sc_rows[i] = False
                idx = torch.tensor(committing, device=dev)
                fresh = [rows[i] for i in committing]
                canvas = canvas.index_copy(0, idx, self._init_canvas(fresh))
                history = history.index_fill(1, idx, -1)
                if stable is not None:  # the next canvas: nothing of it is stable yet
                    stable.reset(idx)
            if committing or verifying:
                masks = None
            if leaving:
                state = model.release(state, leaving)
                masks = None
            now = time.perf_counter()
            for i in busy:
                rows[i].result.wall_time_s += (now - t0) / len(busy)
            for i in leaving:
                res = self._finish(rows[i], now)
                if visible is not None:
                    visible.finished(i, res, rows[i].admitted, read_at)
                yield res
                rows[i], sc_rows[i] = None, False

    def _verified(self, state, canvases: torch.Tensor, hidden: torch.Tensor, at: list[int], rows: list) -> list[int]:
        """The AR mode verifies the canvases of rows `at` (`harness.engine.canvas_verify`): each row emits its accepted
        prefix and the AR token after it, which it pins for its next canvas. Returns the positions each keeps."""
        # AR logits of at most a quarter of the batch at once (float32 plus their model-dtype source: <= 0.375 U),
        # beside the 1 U logits workspace: within the 1.5 U of the memory plan (models.memory)
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

    def _ended(self, row: _Row) -> bool:
        """EOS, a stop string or the length cap in the row's output so far."""
        _, _, reason = cut_at_stop(self.tokenizer, row.outputs, self.model.eos_ids, row.req.stop_strings)
        return reason != "length" or len(row.outputs) >= row.req.max_new_tokens

    def _start(self, req: GenerationRequest) -> _Row:
        check_request(req)
        res = GenerationResult(req.sample_id, [], "", 0, encoder_forwards=1, prompt_tokens=len(req.prompt_ids))
        self._open_canvas(res)
        return _Row(req, res, admitted=time.perf_counter())

    @staticmethod
    def _open_canvas(res: GenerationResult) -> None:
        res.steps_per_canvas.append(0)
        res.accepted_per_step.append([])
        res.renoised_per_step.append([])

    def _init_canvas(self, rows: list[_Row]) -> torch.Tensor:
        dev = self.model.device
        seed = torch.tensor([r.req.seed for r in rows], dtype=torch.long, device=dev)
        canvas_idx = torch.tensor([r.canvas_idx for r in rows], dtype=torch.long, device=dev)
        zero = torch.zeros_like(seed)
        x = streams.tokens(seed, canvas_idx, zero, self.canvas_length, self.model.vocab_size, streams.INIT)
        for i, r in enumerate(rows):  # verification: the emitted AR token, then the rest of the rejected draft
            if r.pin is not None:
                x[i, : 1 + len(r.warm)] = torch.tensor([r.pin, *r.warm], device=dev)
        return x

    def _finish(self, row: _Row, now: float) -> GenerationResult:
        req, res = row.req, row.result
        toks, text, reason = cut_at_stop(
            self.tokenizer, row.outputs[: req.max_new_tokens], self.model.eos_ids, req.stop_strings
        )
        res.token_ids = [t for t in toks if t != self.model.pad_id]  # TPF counts non-pad tokens (as generate())
        res.text, res.finished_by = text, reason
        res.latency_s = now - row.admitted
        return res


def decoder_for(model, sampler: SamplerConfig):
    """The decoder for a built model: block-diffusion adapters get this engine (or, for a `decoder=diffusers` sampler,
    diffusers' pipeline: `harness.engine.diffusers_decoder`); AR decoders decode themselves."""
    if getattr(sampler, "decoder", None) == "diffusers":
        from harness.engine.diffusers_decoder import DiffusersDecoder

        return DiffusersDecoder(model, sampler)
    return BlockDiffusionDecoder(model, sampler) if getattr(model, "kind", None) == DecoderKind.DIFFUSION else model
