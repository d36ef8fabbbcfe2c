"""The whole denoising step as one function over static shapes: what `torch.compile(fullgraph=True)` captures.

Why: eager, a step of the released model issues thousands of small ops (about 5,300 at 30 layers), each a few
microseconds of host time on a GPU, so the host, not the GPU, bounds a small batch. One graph per step lets
inductor fuse the element-wise work and, on CUDA with `mode="reduce-overhead"`, replays the step as one CUDA
graph. Self-conditioning, the decoder layers, the LM head and the sampler step (softcap, temperature, draw,
accept, remask, re-noise, stop) are all in it; the host keeps only its bookkeeping (lengths, the step keys).

What makes the shapes static:
- rows are padded up to a power-of-two bucket (`bucket`): padding rows are free rows (length 0, no
  self-conditioning, keys 0) whose results nobody reads, as the free rows of an eager step are;
- every layer attends over all slots of the preallocated cache (`models.slot_cache`: rows x capacity, a ring
  on sliding layers), with masks built in the graph from the rows' lengths, so no shape follows a context;
- self-conditioning runs for every row and a per-row flag selects it (`torch.where`), instead of a host list;
- the draw is `draw_whole` (no threads, no Python loops).
A graph is therefore compiled per (bucket, cache capacity); the capacity grows by doubling, rarely.

Numerics: transformers' op order as in eager `denoise` + `sampler_step`; the wider attention span (masked
slots), matmuls over padded rows and inductor's fused kernels round differently (tests/test_step_graph.py
states the tolerance). The eager default (`model.compile=false`) does not run this code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.sampler_step import StepOutput, sampler_step, torch_sampling
from models.slot_cache import bucket
from samplers import streams
from samplers.config import SamplerConfig
from samplers.fast_draw import draw_whole

# graphs one compiled function may hold: a graph per (bucket, cache capacity), up to 7 buckets (1..64 rows) times a
# few capacities in a long run, and every instance of a class shares its function's graphs (dynamo's default: 8)
GRAPHS_PER_FUNCTION = 64


def allow_graphs() -> None:
    """Raise dynamo's recompile limit to `GRAPHS_PER_FUNCTION` (never lower it): with `fullgraph=True` the limit
    is a hard failure, not a fallback to eager."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, GRAPHS_PER_FUNCTION)


def replay(graph, args: tuple, in_place: tuple):
    """`graph.fn(*args)` for a compiled graph object (`WholeStep`, `harness.commit_graph.WholeCommit`), counting the
    graphs it compiles in `graph.graphs`. Under `mode="reduce-overhead"` (`graph.static`) the buffers it writes in
    place are static addresses (a new address, a grown cache: a new graph), a CUDA-graph step begins, and the
    outputs are cloned out of the graph's pool before the next replay overwrites it."""
    stats = torch._dynamo.utils.counters["stats"]
    before = stats["unique_graphs"]
    if graph.static:
        for t in in_place:
            torch._dynamo.mark_static_address(t, guard=True)
        torch.compiler.cudagraph_mark_step_begin()
    out = graph.fn(*args)
    if graph.static:
        out = tuple(t.clone() for t in out) if isinstance(out, tuple) else out.clone()
    graph.graphs += stats["unique_graphs"] - before
    return out


class WholeStep:
    """One compiled denoising step per bucket over an adapter's model (`models.diffusion_gemma`) and a sampler.

    `compile=False` runs the same function eagerly (the reference the compiled graph is checked against);
    `backend` / `mode` go to `torch.compile`. `mode="reduce-overhead"` (what the engine asks for on CUDA) replays
    the step as a CUDA graph: the buffers the graph reads and writes in place (the K/V slots, the logits workspace)
    are marked as static addresses, so a replay copies neither in (the small canvas and history are), and the outputs
    (small: canvas, argmax, flags, counts) are cloned out of the graph's memory pool before the next replay
    overwrites it. On the CPU inductor runs the same graph without CUDA graphs (tested there; not yet on a GPU)."""

    def __init__(
        self,
        adapter,
        cfg: SamplerConfig,
        compile: bool = True,
        backend: str | Callable = "inductor",
        mode: str | None = None,
    ):
        self.adapter, self.cfg = adapter, cfg
        self.sample = torch_sampling(draw_whole)
        self._cache = None
        self._position_keys: torch.Tensor | None = None  # streams.position_keys: an input, not built in the graph
        self.graphs = 0  # graphs compiled (one per bucket and cache capacity; a recompile counts)
        self.shapes: set[tuple[int, int]] = set()  # the (bucket, cache capacity) pairs run
        self.fn = self.step
        self.static = compile and mode == "reduce-overhead"
        if compile:
            allow_graphs()
            self.fn = torch.compile(self.step, fullgraph=True, dynamic=False, backend=backend, mode=mode)

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

        `logits` (b, C, V) float32 is the workspace: read as the previous step's processed logits (rows with
        `sc_rows[i]`), written with this step's processed logits (the next step's self-conditioning input)."""
        b, c = canvas.shape
        args = self.graph_args(state, canvas, history, logits, sc_rows, keys, temperature)
        state.cache.note_writes(list(range(b)), state.lengths[:b], c)  # the graph writes the canvas K/V
        self.shapes.add((b, state.cache.capacity))
        out = replay(self, args, (logits, *state.cache.keys, *state.cache.values))  # canvas, history: copied in
        cache = state.cache
        cache.bytes_written += sum(2 * b * k.shape[1] * c * k.shape[3] * k.element_size() for k in cache.keys)
        return StepOutput(*out)

    def graph_args(self, state, canvas, history, logits, sc_rows, keys, temperature) -> tuple:
        """What the graph (`step`) gets for one step over rows 0..b-1 of `state`: the host's bookkeeping (lengths,
        highest positions, flags) as device tensors, then the slot buffers."""
        b, c = canvas.shape
        if b != bucket(b) or state.cache.rows < b:
            raise ValueError(f"a whole step runs a bucket of rows within the cache's {state.cache.rows}, got {b}")
        cache = self._cache = state.cache
        lengths = state.lengths[:b]
        highest = cache.block_highest(list(range(b)), lengths, c)
        dev = canvas.device
        flags = torch.tensor(sc_rows, dtype=torch.bool, device=dev)
        starts = torch.tensor(lengths, dtype=torch.long, device=dev)
        top = torch.tensor(highest, dtype=torch.long, device=dev)
        if self._position_keys is None or self._position_keys.shape[0] != c:
            self._position_keys = streams.position_keys(c, dev)
        args = (canvas, history, logits, flags, starts, top, keys, temperature, self._position_keys)
        return (*args, cache.keys, cache.values)

    def step(
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
        cache_keys,
        cache_values,
    ):
        """The graph: pure tensor code over static shapes; returns `StepOutput`'s fields as a tuple."""
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
        positions = starts[:, None] + torch.arange(c, device=canvas.device)
        spans = {t: cache.slots_of(t) for t in set(cache.layer_types)}
        masks = cache.block_masks_at(starts, highest, c, a.dtype, spans)
        slots = cache.canvas_slots(starts, c)
        slots.keys, slots.values = cache_keys, cache_values
        hidden = a._decoder_layers(hidden, positions, masks, slots)
        x = torch.matmul(hidden, a.model.lm_head.weight.t()).float()
        v = a.vocab_size
        out = sampler_step(self.cfg, self.sample, x, temperature, a.softcap, keys, canvas, history, v, position_keys)
        logits.copy_(x)  # processed in place by the sampler step: the next step's self-conditioning input
        return out.canvas, out.argmax, out.history, out.finished, out.kept, out.mean_entropy, out.keep
