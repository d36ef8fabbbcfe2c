"""The commit (the causal re-encode of finished canvases into their rows' slots) as one compiled graph per bucket.

Why: under `model.compile=step` a commit usually folds into the next step's graph (`harness.engine.step_graph`,
`WholeStep.with_commit`); where it cannot (the model's encoder layers are not its decoder's, a packing move needs
the rows committed first, a verification needs the hidden states at once) it runs as this graph, since eagerly it
is an encoder forward of thousands of small ops (about 4,600 kernels at the released 30 layers), each a few
microseconds of host time on a GPU, and its element-wise work unfused.

What makes the shapes static:
- the committing rows are padded to a power-of-two bucket with rows that do not commit. A padding row re-encodes
  pad tokens at its own canvas positions (right after its context): slots its next denoising step writes before
  any layer reads them. A sliding layer's ring holds window - 1 + canvas slots, so those writes never reach a
  position the row's next canvas can see. Their hidden states are dropped, and the host records no write for them;
- every layer attends over all slots of the committing rows (`SlotCache.causal_masks_at` from device tensors), read
  once per layer as a gathered batch (`models.cache.slot_cache.CanvasSlots`, counted in `bytes_gathered`); no other
  row's
  K/V is read or moved;
- the encoder's layers run as transformers' `DiffusionGemmaEncoderTextModel.forward` does (embeddings, rotary,
  layers, final norm), with the cache and masks built in the graph.
A graph is compiled per (bucket, cache capacity). Numerics: the same op order; inductor's fused kernels and the
wider masked span round differently (tests/test_step_graph.py states the tolerance).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.engine.step_graph import allow_graphs, replay
from models.cache.slot_cache import bucket
from models.diffusion_gemma import run_layers


class WholeCommit:
    """One compiled causal re-encode per bucket of committing rows over a DiffusionGemma adapter's encoder.

    `compile=False` runs the same function eagerly; `mode="reduce-overhead"` (CUDA) replays it as a CUDA graph,
    the K/V slot buffers marked as static addresses and the hidden states cloned out of the graph's pool."""

    def __init__(self, adapter, compile: bool = True, backend: str | Callable = "inductor", mode: str | None = None):
        self.adapter = adapter
        self._cache = None
        self.graphs = 0  # graphs compiled (one per bucket and cache capacity)
        self.shapes: set[tuple[int, int]] = set()
        self.static = compile and mode == "reduce-overhead"
        self.fn = self.encode
        if compile:
            allow_graphs()
            self.fn = torch.compile(self.encode, fullgraph=True, dynamic=False, backend=backend, mode=mode)

    @torch.no_grad()
    def __call__(self, state, canvas: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """`adapter.encode_canvas(state, canvas, rows)` as a graph: canvas i's K/V written after row rows[i]'s
        context, the (n, C, H) hidden states returned; the context lengths do not move (`adapter.advance` does)."""
        n, c = canvas.shape
        cache = state.cache
        args = self.graph_args(state, canvas, rows)
        cache.note_writes(list(rows), [state.lengths[r] for r in rows], c)  # padding rows: nothing anyone reads
        k = args[0].shape[0]
        self.shapes.add((k, cache.capacity))
        hidden = replay(self, args, (*cache.keys, *cache.values))
        cache.bytes_written += sum(2 * n * t.shape[1] * c * t.shape[3] * t.element_size() for t in cache.keys)
        cache.bytes_gathered += sum(2 * k * t[0].numel() * t.element_size() for t in cache.keys)
        return hidden[:n]

    def graph_args(self, state, canvas: torch.Tensor, rows: list[int]) -> tuple:
        """What the graph (`encode`) gets: the canvases padded to a bucket of rows (pad tokens, rows that do not
        commit), the slot rows, their starts and highest positions as device tensors, then the slot buffers."""
        n, c = canvas.shape
        cache = state.cache
        k = bucket(n)
        if k > cache.rows or len(set(rows)) != n:
            raise ValueError(f"a commit of {n} distinct rows pads to {k}, more than the cache's {cache.rows} rows")
        taken = set(rows)
        every = list(rows) + [r for r in range(cache.rows) if r not in taken][: k - n]
        starts = [state.lengths[r] for r in every]
        cache.reserve(max(starts) + c)  # before the buffers are handed over: growing reallocates them
        highest = cache.block_highest(every, starts, c)
        dev = canvas.device
        ids = torch.cat([canvas, torch.full((k - n, c), self.adapter.pad_id, dtype=canvas.dtype, device=dev)])
        self._cache = cache

        def on_device(xs):
            return torch.tensor(xs, dtype=torch.long, device=dev)

        return (ids, on_device(every), on_device(starts), on_device(highest), cache.keys, cache.values)

    def encode(self, ids, rows, starts, highest, cache_keys, cache_values):
        """The graph: transformers' encoder text forward over slot rows `rows`, pure tensor code."""
        a = self.adapter
        text = a.model.model.encoder.language_model
        cache = self._cache  # its geometry only (ints): the buffers are arguments
        c = ids.shape[1]
        positions = starts[:, None] + torch.arange(c, device=ids.device)
        spans = {t: cache.slots_of(t) for t in set(cache.layer_types)}
        masks = cache.causal_masks_at(positions, highest, a.dtype, spans)
        slots = cache.canvas_slots(starts, c, rows)
        slots.keys, slots.values = cache_keys, cache_values
        layers = text.layers[: text.config.num_hidden_layers]
        return run_layers(text, layers, text.config.layer_types, text.embed_tokens(ids), positions, masks, slots)
