"""The whole denoising step as one function over static shapes: what `torch.compile(fullgraph=True)` captures.

Why: eager, a step of the released model issues thousands of small ops (about 5,300 at 30 layers), each a few
microseconds of host time on a GPU, so the host, not the GPU, bounds a small batch. One graph per step lets
inductor fuse the element-wise work and, on CUDA with `mode="reduce-overhead"`, replays the step as one CUDA
graph. Self-conditioning, the decoder layers, the LM head and the sampler step (softcap, temperature, draw,
accept, remask, re-noise, stop) are all in it; the host keeps only its bookkeeping (lengths, the step keys).

What makes the shapes static:
- rows are padded up to a power-of-two bucket (`bucket`): padding rows are free rows (length 0, no
  self-conditioning, keys 0) whose results nobody reads, as the free rows of an eager step are;
- the sliding layers attend their whole ring, the full layers the first `span` slots of the preallocated cache
  (`models.cache.slot_cache`), with masks built in the graph from the rows' lengths. The span follows the longest row
  (rounded up to `SPAN_QUANTUM`) as a dynamic size, so one graph serves every span below the capacity (a second,
  at the capacity, where the slice is contiguous) and what a run reserves ahead costs no attention;
- self-conditioning runs for every row and a per-row flag selects it (`torch.where`), instead of a host list;
- the draw is `draw_whole` (no threads, no Python loops), over logits processed out of place and read once
  (`samplers.sampler_step.graph_sampling`);
A graph is therefore compiled per (bucket, cache capacity); the capacity grows by doubling, rarely.

A commit folds into the next step (`with_commit`) where the encoder's layers are the decoder's (tied weights,
equal buffers: `models.diffusion_gemma.encoder_is_decoder`): the rows that finished a canvas re-encode it causally
as k more batch entries of the same forward, so the expert weights are read once for both (a commit of its own
re-reads them: ~24 GB per event at the released shapes). The k entries are padded to a bucket: a padding entry
re-encodes pad tokens right after its row's canvas, slots past the row's highest position that no mask shows and
its next commit rewrites first. A committing row's canvas starts after the canvas it commits; at layer l it sees
that canvas's K/V of layer l, written by the same layer call (`models.cache.slot_attention.JointMask`). A sliding layer
then holds window - 1 + 2C slots (`DiffusionGemmaAdapter.open`). A graph per (bucket, commit bucket, capacity).

Numerics: transformers' op order as in eager `denoise` + `sampler_step`; the wider attention span (masked
slots), matmuls over padded rows and inductor's fused kernels round differently (tests/test_step_graph.py
states the tolerance). The eager default (`model.compile=false`) does not run this code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from models.cache.slot_attention import JointMask
from models.cache.slot_cache import bucket
from samplers import streams
from samplers.config import SamplerConfig
from samplers.sampler_step import StepOutput, graph_sampling, processed_logits, sampler_step

# graphs one compiled function may hold: a graph per (bucket, commit bucket, cache capacity), up to 7 buckets
# (1..64 rows) times up to 7 commit buckets times a few capacities in a long run, and every instance of a class
# shares its function's graphs (dynamo's default: 8); and all compiled functions of the process together
GRAPHS_PER_FUNCTION = 256
GRAPHS_PER_PROCESS = 1024
# the full layers attend the slots up to the longest row rounded up to this (`WholeStep.span_of`): at most this much
# padding per row, and on CUDA one graph capture per multiple of it (4 canvases at the released C = 256)
SPAN_QUANTUM = 1024


def allow_graphs() -> None:
    """Raise dynamo's recompile limits to `GRAPHS_PER_FUNCTION` per function and `GRAPHS_PER_PROCESS` in all
    (never lower them): with `fullgraph=True` a limit is a hard failure, not a fallback to eager."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, GRAPHS_PER_FUNCTION)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, GRAPHS_PER_PROCESS)


def replay(graph, args: tuple, in_place: tuple, fn: Callable | None = None):
    """`(fn or graph.fn)(*args)` for a compiled graph object (`WholeStep`, `harness.engine.commit_graph.WholeCommit`),
    counting the graphs it compiles in `graph.graphs`. Under `mode="reduce-overhead"` (`graph.static`) the buffers
    it writes in place are static addresses, a CUDA-graph step begins, and the outputs are cloned out of the graph's
    pool before the next replay overwrites it. The marks are unguarded: the engine passes a new view of the same
    buffer every step (`logits.raw[:b]`), which a guard on the tensor would recompile for, and a guarded tensor
    stays referenced by its graph (every grown cache kept alive). A new address (a grown cache) makes the
    CUDA-graph tree record again instead."""
    stats = torch._dynamo.utils.counters["stats"]
    before = stats["unique_graphs"]
    if graph.static:
        for t in in_place:
            torch._dynamo.mark_static_address(t, guard=False)
        torch.compiler.cudagraph_mark_step_begin()
    out = (fn or graph.fn)(*args)
    if graph.static:
        out = tuple(t.clone() for t in out) if isinstance(out, tuple) else out.clone()
    graph.graphs += stats["unique_graphs"] - before
    return out


def canvas_starts(state, b: int, c: int, committing: list[int]) -> list[int]:
    """Where rows 0..b-1's canvases start this step: after each context, and for a row committing its last canvas in
    the step (`WholeStep.with_commit`) after that canvas."""
    taken = set(committing)
    return [n + c if r in taken else n for r, n in enumerate(state.lengths[:b])]


class WholeStep:
    """One compiled denoising step per bucket over an adapter's model (`models.diffusion_gemma`) and a sampler.

    `compile=False` runs the same function eagerly (the reference the compiled graph is checked against);
    `backend` / `mode` go to `torch.compile`. `mode="reduce-overhead"` (what the engine asks for on CUDA) replays
    the step as a CUDA graph: the buffers the graph reads and writes in place (the K/V slots, the logits workspace)
    are marked as static addresses, so a replay copies neither in (the small canvas and history are), and the outputs
    (small: canvas, argmax, flags, counts) are cloned out of the graph's memory pool before the next replay
    overwrites it. On the CPU inductor runs the same graph without CUDA graphs (tested there; not yet on a GPU).
    `folds`: `with_commit` runs a commit inside the step (the encoder's layers are the decoder's)."""

    def __init__(
        self,
        adapter,
        cfg: SamplerConfig,
        compile: bool = True,
        backend: str | Callable = "inductor",
        mode: str | None = None,
        span_quantum: int = SPAN_QUANTUM,
    ):
        self.adapter, self.cfg = adapter, cfg
        self._cache = None
        self._position_keys: torch.Tensor | None = None  # streams.position_keys: an input, not built in the graph
        self._slot_range: torch.Tensor | None = None  # arange(span): the span as an input's (dynamic) size
        self.span_quantum = span_quantum
        self.graphs = 0  # graphs compiled (one per bucket, commit bucket and cache capacity; a recompile counts)
        self.shapes: set[tuple[int, int, int]] = set()  # the (bucket, commit bucket or 0, cache capacity) run
        self.spans: set[int] = set()  # the full layers' attended spans run (one graph for all)
        self.folds = bool(getattr(adapter, "commit_folds", False))
        self.fn, self.fn_joint = self.step, self.joint
        self.static = compile and mode == "reduce-overhead"
        if compile:
            allow_graphs()
            self.fn = torch.compile(self.step, fullgraph=True, dynamic=False, backend=backend, mode=mode)
            self.fn_joint = torch.compile(self.joint, fullgraph=True, dynamic=False, backend=backend, mode=mode)

    @torch.no_grad()
    def __call__(
        self,
        state,
        canvas: torch.Tensor,
        history: torch.Tensor,
        logits: torch.Tensor,
        sc_rows: list[bool],
        keys: torch.Tensor,
        temperature: torch.Tensor,
    ) -> StepOutput:
        """One step over rows 0..b-1 of `state` (b = canvas.shape[0], a bucket; the cache holds at least b rows).

        `logits` (b, C, V), float32 or the model dtype (what self-conditioning casts it to), is the workspace: read
        as the previous step's processed logits (rows with `sc_rows[i]`), written with this step's processed
        logits (the next step's self-conditioning input)."""
        args = self.graph_args(state, canvas, history, logits, sc_rows, keys, temperature)
        return StepOutput(*self._run(state, args, canvas.shape, None, self.fn))

    @torch.no_grad()
    def with_commit(
        self,
        state,
        canvas: torch.Tensor,
        history: torch.Tensor,
        logits: torch.Tensor,
        sc_rows: list[bool],
        keys: torch.Tensor,
        temperature: torch.Tensor,
        commit: torch.Tensor,
        rows: list[int],
    ) -> tuple[StepOutput, torch.Tensor]:
        """The step, with rows `rows` committing `commit` (n, C) in the same forward (`folds` must hold): their
        canvases (`canvas[rows]`, the next ones) start C after their context lengths, where the committed canvas
        ends. Returns the step's output and the committed canvases' (n, C, H) hidden states for `adapter.advance`
        (which moves the lengths on)."""
        if not self.folds:
            raise ValueError("this model's encoder layers are not its decoder's: a commit cannot fold into a step")
        args = self.graph_args(state, canvas, history, logits, sc_rows, keys, temperature, (commit, rows))
        *out, hidden = self._run(state, args, canvas.shape, rows, self.fn_joint)
        return StepOutput(*out), hidden[: len(rows)]

    def _run(self, state, args: tuple, shape, rows: list[int] | None, fn) -> tuple:
        (b, c), cache = shape, state.cache
        # the graph writes the canvas K/V (and the commit's)
        cache.note_writes(list(range(b)), canvas_starts(state, b, c, rows or []), c)
        k = bucket(len(rows)) if rows else 0
        self.shapes.add((b, k, cache.capacity))
        out = replay(self, args, (args[2], *cache.keys, *cache.values), fn)  # canvas, history: copied in
        per_row = sum(2 * t.shape[1] * c * t.shape[3] * t.element_size() for t in cache.keys)
        cache.bytes_written += (b + len(rows or [])) * per_row
        span = self._slot_range.shape[0]  # what the commit entries gather of their rows, per layer
        cache.bytes_gathered += sum(
            2 * k * t.shape[1] * (t.shape[2] if cache.is_sliding_type(lt) else span) * t.shape[3] * t.element_size()
            for t, lt in zip(cache.keys, cache.layer_types, strict=True)
        )
        return out

    def graph_args(self, state, canvas, history, logits, sc_rows, keys, temperature, commit=None) -> tuple:
        """What the graph (`step`, or `joint` with `commit` = (canvases, rows)) gets for one step over rows 0..b-1
        of `state`: the host's bookkeeping (lengths, highest positions, flags) as device tensors; for a commit its
        canvases padded to a bucket of entries, their slot rows, starts and highest positions; the slot buffers."""
        b, c = canvas.shape
        cache = self._cache = state.cache
        if b != bucket(b) or cache.rows < b:
            raise ValueError(f"a whole step runs a bucket of rows within the cache's {cache.rows} rows, got {b}")
        committing = [] if commit is None else list(commit[1])
        n, k = len(committing), bucket(len(committing)) if committing else 0
        if k > b or len(set(committing)) != n or any(r >= b for r in committing):
            raise ValueError(f"a commit of {n} distinct rows of the step's {b} pads to {k} entries")
        if commit is not None and cache.max_chunk < 2 * c:
            raise ValueError(f"a commit folded into a step writes {2 * c} positions per row: open the state so")
        lengths = canvas_starts(state, b, c, committing)
        taken = set(committing)
        pads = [r for r in range(b) if r not in taken][: k - n]  # their re-encode of pad tokens: after their canvas
        cache.reserve(max([m + c for m in lengths] + [lengths[r] + 2 * c for r in pads]))  # before the handover
        highest = cache.block_highest(list(range(b)), lengths, c)
        dev = canvas.device

        def on_device(xs, dtype=torch.long):
            return torch.tensor(xs, dtype=dtype, device=dev)

        if self._position_keys is None or self._position_keys.shape[0] != c:
            self._position_keys = streams.position_keys(c, dev)
        starts = [state.lengths[r] for r in committing] + [lengths[r] + c for r in pads]
        tops = [highest[r] for r in committing] + [max(highest[r], lengths[r] + 2 * c - 1) for r in pads]
        span = self.span_of(max(highest + tops) + 1, cache.capacity)
        if self._slot_range is None or self._slot_range.shape[0] != span:
            self._slot_range = torch.arange(span, device=dev)
        self.spans.add(span)
        # one graph for every span below the capacity (CUDA: a capture each), one at it (a contiguous slice)
        torch._dynamo.maybe_mark_dynamic(self._slot_range, 0)
        args = (canvas, history, logits, on_device(sc_rows, torch.bool), on_device(lengths), on_device(highest))
        args += (keys, temperature, self._position_keys, self._slot_range)
        if commit is None:
            return (*args, cache.keys, cache.values)
        ids = torch.cat([commit[0], torch.full((k - n, c), self.adapter.pad_id, dtype=commit[0].dtype, device=dev)])
        return (*args, ids, on_device(committing + pads), on_device(starts), on_device(tops), cache.keys, cache.values)

    def span_of(self, top: int, capacity: int) -> int:
        """Slots the full layers attend when the highest position any row holds after the step is top - 1: up to
        it, rounded up to `span_quantum` (so a CUDA graph is captured per quantum, not per step), within the
        cache. What the cache reserves beyond that (a run's max_new_tokens) costs no attention."""
        return min(capacity, -(-top // self.span_quantum) * self.span_quantum)

    def step(self, *args):
        """The graph (`_forward`'s arguments): pure tensor code over static shapes but the attended span;
        `StepOutput`'s fields as a tuple."""
        return self._forward(*args)

    def joint(self, *args):
        """The graph of a step with a commit folded in (`_forward`'s arguments, the commit's ids, rows, starts and
        highest positions before the slot buffers): `StepOutput`'s fields, then the commit entries' hidden states
        (k, C, H)."""
        *step_args, ids, rows, cstarts, chighest, ck, cv = args
        return self._forward(*step_args, ck, cv, commit=(ids, rows, cstarts, chighest))

    def _forward(
        self,
        canvas,
        history,
        logits,
        sc_rows,
        starts,
        highest,
        keys,
        temperature,
        position_keys,
        slot_range,
        cache_keys,
        cache_values,
        commit=None,
    ):
        a = self.adapter
        dec, cache = a.model.model.decoder, self._cache  # its geometry only (ints): the buffers are arguments
        b, c = canvas.shape
        w = dec.embed_tokens.weight
        embeds = dec.embed_tokens(canvas)
        # as transformers: softmax in float32 of the model-dtype logits, in the weight dtype @ weight x embed_scale
        probs = logits.to(w.dtype).softmax(dim=-1, dtype=torch.float32).to(w.dtype)
        signal = torch.matmul(probs, w) * dec.embed_tokens.embed_scale.to(embeds.dtype)
        soft = torch.where(sc_rows[:, None, None], signal, torch.zeros_like(signal))
        hidden = dec.self_conditioning(embeds, soft)
        offsets = torch.arange(c, device=canvas.device)
        positions = starts[:, None] + offsets
        # sliding layers attend their ring, full layers the slots up to the span (`span_of`: a dynamic size)
        spans = {t: cache.slots_of(t) if cache.is_sliding_type(t) else slot_range.shape[0] for t in cache.layer_types}
        masks = cache.block_masks_at(starts, highest, c, a.dtype, spans)
        if commit is None:
            slots = cache.canvas_slots(starts, c, spans=spans)
        else:  # k more entries: the causal re-encode of finished canvases (transformers' encoder text forward)
            ids, rows, cstarts, chighest = commit
            hidden = torch.cat([hidden, a.model.model.encoder.language_model.embed_tokens(ids)])
            cpos = cstarts[:, None] + offsets
            causal = cache.causal_masks_at(cpos, chighest, a.dtype, spans)
            masks = {t: JointMask(masks[t], causal[t], rows) for t in masks}
            every = torch.cat([torch.arange(b, device=rows.device), rows])
            slots = cache.canvas_slots(torch.cat([starts, cstarts]), c, every, whole=True, spans=spans)
            positions = torch.cat([positions, cpos])
        slots.keys, slots.values = cache_keys, cache_values
        hidden = a._decoder_layers(hidden, positions, masks, slots)
        raw = torch.matmul(hidden[:b], a.model.lm_head.weight.t())  # in the model dtype
        # softcap and temperature out of place, the next step's self-conditioning input written before the draw's
        # scans and sorts: one fused kernel reads raw, reduces it for the draw and writes the workspace
        x = processed_logits(raw, a.softcap, temperature)
        logits.copy_(x)
        v, sample = a.vocab_size, graph_sampling(raw)
        out = sampler_step(self.cfg, sample, x, temperature, a.softcap, keys, canvas, history, v, position_keys)
        fields = (out.canvas, out.argmax, out.history, out.finished, out.kept, out.mean_entropy, out.keep)
        return fields if commit is None else (*fields, hidden[b:])
