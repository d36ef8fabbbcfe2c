"""Per-row KV slots in preallocated buffers: the one cache behind continuous batching, diffusion commits and
speculative rollback.

Every batch row owns a slot row of each layer's buffer (rows, kv_heads, capacity, head_dim). A forward writes
only its new K/V: the positions `start_b .. start_b + n - 1` of each row it runs (`begin`), scattered into that
row's slots. Nothing else moves: admitting a request reuses a free row (`reset`), a finished row is simply
forgotten, and rolling a row back (rejected draft tokens, or a denoised canvas that will be re-encoded) is
just starting its next write at an earlier position. Which slot holds which position is a pure function of the
highest position written (`written`, tracked on the host), so masks are built from positions and no step
reads the device.

Full-attention layers store position p in slot p (capacity grows by doubling when a row needs more, an
amortised copy). Sliding-window layers keep a ring of `window - 1 + max_chunk` slots (position p in slot
p mod ring): a chunk of up to `max_chunk` new positions is written before attention, and the positions it
overwrites are older than any of the chunk's queries can see. Attention spans the ring, or the full layers'
slots up to the longest row in flight (the padding waste is `padding_waste()`).

The cache speaks the small part of transformers' `Cache` interface the Gemma 4 / DiffusionGemma attention
layers call (`update(keys, values, layer_idx)`), so the models' own forwards run on it unchanged.
"""

from __future__ import annotations

import torch

from models.cache.slot_attention import ROWS

# a forward over scattered rows attends them in place, one attention call per row, when the rows are few or each
# brings many queries (a commit, an admission: the call's work dwarfs its launch); many rows of a few queries each
# (the end of an AR run) are gathered into one batch instead (one call, a copy of their K/V: `bytes_gathered`)
ROW_LOOP_MAX = 4
ROW_LOOP_MIN_QUERIES = 16


def bucket(rows: int) -> int:
    """The power of two at or above `rows`: the batch sizes a whole compiled step runs (1, 2, 4, 8, ...)."""
    return 1 << max(0, rows - 1).bit_length()


class SlotCache:
    """Preallocated K/V slots for `rows` batch rows of a causal LM (or DiffusionGemma's encoder)."""

    is_compileable = False

    def __init__(
        self,
        config,
        rows: int,
        capacity: int,
        max_chunk: int,
        dtype: torch.dtype,
        device: torch.device | str,
        row_indexed: bool = False,
    ):
        if rows < 1 or capacity < 1 or max_chunk < 1:
            raise ValueError(f"rows, capacity and max_chunk must be >= 1, got {rows}, {capacity}, {max_chunk}")
        self.rows, self.max_chunk, self.dtype, self.device = rows, max_chunk, dtype, torch.device(device)
        self.row_indexed = row_indexed  # the model attends through `models.cache.slot_attention`: no row gathers
        window = getattr(config, "sliding_window", None)
        # a config without layer types (Mistral / Ministral 3's) has one attention for all layers: its window's
        kinds = getattr(config, "layer_types", None)
        kinds = kinds or ["sliding_attention" if window else "full_attention"] * config.num_hidden_layers
        self.layer_types: list[str] = list(kinds)
        self.window = window
        self.ring = window - 1 + max_chunk if window else None
        self.capacity = capacity
        self.keys: list[torch.Tensor | None] = [None] * len(self.layer_types)
        self.values: list[torch.Tensor | None] = [None] * len(self.layer_types)
        self.written = [-1] * rows  # highest position written per row (host); -1 = empty
        self._rows: torch.Tensor | None = None  # the rows the current forward writes (None = 0..b-1)
        self._slots: dict[str, torch.Tensor] = {}  # layer type -> (b, n) slot index per new position
        self._span: dict[str, int] = {}
        self.bytes_written = 0  # K/V bytes written by forwards (new K/V only)
        self.bytes_moved = 0  # K/V bytes copied within the cache (capacity growth; `move` at the end of a run)
        self.bytes_gathered = 0  # a forward over scattered rows reads its rows' K/V into a batch (theirs alone)

    # --- geometry --------------------------------------------------------------------------------------
    def is_sliding_type(self, layer_type: str) -> bool:
        return layer_type == "sliding_attention" and self.ring is not None

    def slots_of(self, layer_type: str) -> int:
        """Slots a layer holds per row: the capacity, a ring never more than that (short contexts need less)."""
        return min(self.ring, self.capacity) if self.is_sliding_type(layer_type) else self.capacity

    def modulus(self, layer_type: str) -> int:
        """Position p lives in slot p mod this (a ring smaller than its size holds p in slot p: p < capacity)."""
        return self.ring if self.is_sliding_type(layer_type) else self.capacity

    def span(self, layer_type: str, rows: list[int]) -> int:
        """Slots to attend over for `rows`: up to the longest row (a ring never beyond its size; slots past the
        highest position written are empty while a row is shorter than the ring)."""
        return min(self.slots_of(layer_type), max(self.written[r] for r in rows) + 1)

    def key_positions(self, layer_type: str, rows: list[int], span: int, highest: list[int] | None = None):
        """(len(rows), span) the position each of the first `span` slots holds (-1: empty), from the highest
        position written per row alone (`highest`: as it will be once the next forward has written)."""
        top = highest if highest is not None else [self.written[r] for r in rows]
        hi = torch.tensor(top, dtype=torch.long, device=self.device)
        return slot_positions(hi, span, self.modulus(layer_type))

    # --- the write context of one forward ------------------------------------------------------------
    def reset(self, rows: list[int]) -> None:
        """Rows take new requests: their slots are empty again (nothing is cleared: masks hide old K/V)."""
        for r in rows:
            self.written[r] = -1

    def begin(self, rows: list[int] | None, starts: list[int], n: int, real: list[int] | None = None) -> None:
        """The next forward writes positions `starts[i] .. starts[i] + n - 1` of batch row `rows[i]`
        (`rows=None`: rows 0..len(starts)-1, the whole batch in flight, attended without copies).

        `real[i]` (default n) of them are the row's own tokens; the rest pad a shorter row to the chunk and
        are rewritten later (they sit past the row's highest position, where masks and the ring see nothing)."""
        if n > self.max_chunk:
            raise ValueError(f"a forward may write at most {self.max_chunk} positions per row, got {n}")
        rows_list = list(range(len(starts))) if rows is None else list(rows)
        self.note_writes(rows_list, starts, n, real)
        pos = torch.tensor(starts, dtype=torch.long, device=self.device)[:, None] + torch.arange(n, device=self.device)
        contiguous = rows_list == list(range(len(rows_list)))
        self._rows = None if contiguous else torch.tensor(rows_list, dtype=torch.long, device=self.device)
        self._row_index = (torch.arange(len(rows_list), device=self.device) if self._rows is None else self._rows)[
            :, None
        ].expand(len(rows_list), n)
        self._row_list = rows_list
        self._slots, self._span = {}, {}
        for t in set(self.layer_types):
            self._slots[t] = torch.remainder(pos, self.ring) if self.is_sliding_type(t) else pos
            self._span[t] = min(self.slots_of(t), max(s + n for s in starts))

    def note_writes(self, rows: list[int], starts: list[int], n: int, real: list[int] | None = None) -> None:
        """The host's record of a forward writing positions starts[i].. of rows[i] (room made, highest position
        per row): what `begin` notes, and all a compiled step needs noted (its graph writes the slots)."""
        self.reserve(max(s + n for s in starts))
        for r, s, m in zip(rows, starts, real or [n] * len(starts), strict=True):
            self.written[r] = max(self.written[r], s + m - 1)

    def masks(self, query_positions: torch.Tensor, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Causal additive attention masks (b, 1, q, span) per layer type for the current forward's rows: a key
        is visible to a query at or after its position, within the sliding window."""
        return self.masks_for(self._row_list, query_positions, dtype, self._span)

    def masks_for(self, rows, query_positions, dtype, spans=None) -> dict[str, torch.Tensor]:
        """Causal masks for reading the slots of `rows` (spans: up to the longest row by default)."""
        spans = {t: spans[t] if spans else self.span(t, rows) for t in set(self.layer_types)}
        highest = torch.tensor([self.written[r] for r in rows], dtype=torch.long, device=self.device)
        return self.causal_masks_at(query_positions, highest, dtype, spans)

    def block_masks(self, rows: list[int], lengths: list[int], n: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Bidirectional masks (b, 1, 1, span) for a block of n positions after each row's context (a diffusion
        canvas at `lengths[i]`..): every query sees the whole context and block, the sliding layers the last
        `window - 1` context positions (what transformers' sliding cache layer holds) and the block."""
        self.reserve(max(lengths) + n)  # the block's slots exist before the masks over them are built
        starts = torch.tensor(lengths, dtype=torch.long, device=self.device)
        highest = torch.tensor(self.block_highest(rows, lengths, n), dtype=torch.long, device=self.device)
        spans = {t: min(self.slots_of(t), max(lengths) + n) for t in set(self.layer_types)}
        return self.block_masks_at(starts, highest, n, dtype, spans)

    def block_highest(self, rows: list[int], lengths: list[int], n: int) -> list[int]:
        """The highest position of each row once a block of n positions after its context is written."""
        return [max(self.written[r], m + n - 1) for r, m in zip(rows, lengths, strict=True)]

    def block_masks_at(
        self, starts: torch.Tensor, highest: torch.Tensor, n: int, dtype: torch.dtype, spans: dict[str, int]
    ) -> dict[str, torch.Tensor]:
        """`block_masks` from device tensors alone (the block's first position and each row's highest position,
        (b,)), over `spans[t]` slots: pure tensor code, so a compiled step builds its masks in its graph."""
        out = {}
        hi = starts[:, None, None, None] + n
        for t, span in spans.items():
            kp = slot_positions(highest, span, self.modulus(t))[:, None, None, :]
            seen = (kp >= 0) & (kp < hi)
            if self.is_sliding_type(t):
                seen = seen & (kp >= hi - n - (self.window - 1))
            out[t] = _additive(seen, dtype)
        return out

    def causal_masks_at(
        self, positions: torch.Tensor, highest: torch.Tensor, dtype: torch.dtype, spans: dict[str, int]
    ) -> dict[str, torch.Tensor]:
        """`masks_for` from device tensors alone (the queries' positions (b, n), each row's highest position once
        the forward has written (b,)), over `spans[t]` slots: pure tensor code, for a compiled commit's graph."""
        out = {}
        qp = positions[:, None, :, None]
        for t, span in spans.items():
            kp = slot_positions(highest, span, self.modulus(t))[:, None, None, :]
            seen = (kp >= 0) & (kp <= qp)
            if self.is_sliding_type(t):
                seen = seen & (qp - kp < self.window)
            out[t] = _additive(seen, dtype)
        return out

    # --- transformers' Cache interface (what the attention layers call) ------------------------------
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Write the forward's new K/V (b, heads, n, dim) into its rows' slots; return the K/V to attend over."""
        t = self.layer_types[layer_idx]
        if self.keys[layer_idx] is None:
            shape = (self.rows, key_states.shape[1], self.slots_of(t), key_states.shape[3])
            self.keys[layer_idx] = torch.zeros(shape, dtype=key_states.dtype, device=self.device)
            self.values[layer_idx] = torch.zeros(shape, dtype=value_states.dtype, device=self.device)
        slots, span, rows = self._slots[t], self._span[t], self._row_index
        b = key_states.shape[0]
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[rows, :, slots] = key_states.transpose(1, 2).to(k.dtype)
        v[rows, :, slots] = value_states.transpose(1, 2).to(v.dtype)
        self.bytes_written += 2 * key_states.numel() * k.element_size()
        if self._rows is None:
            return k[:b, :, :span], v[:b, :, :span]
        if self.row_indexed and (b <= ROW_LOOP_MAX or key_states.shape[2] >= ROW_LOOP_MIN_QUERIES):
            # the whole buffer as a view, each query row reading its own slot row
            keys, values = k[:, :, :span], v[:, :, :span]
            setattr(keys, ROWS, self._row_list)
            return keys, values
        self.bytes_gathered += 2 * b * k.shape[1] * span * k.shape[3] * k.element_size()
        return k[self._rows, :, :span], v[self._rows, :, :span]

    def canvas_slots(
        self,
        starts: torch.Tensor,
        n: int,
        rows: torch.Tensor | None = None,
        whole: bool = False,
        spans: dict | None = None,
    ) -> CanvasSlots:
        """The writes of a block of n positions after each row's context (rows 0..b-1, or slot rows `rows` (b,);
        `starts` (b,) on the device), as a cache object of pure tensor code that a compiled graph creates inside.
        `whole`: the layers get the whole buffers back (a `models.cache.slot_attention.JointMask` says who reads what);
        `spans[t]`: the first slots a layer of type t attends (default all)."""
        pos = starts[:, None] + torch.arange(n, device=starts.device)
        slots = {t: torch.remainder(pos, self.ring) if self.is_sliding_type(t) else pos for t in set(self.layer_types)}
        return CanvasSlots(self.keys, self.values, self.layer_types, slots, rows, whole, spans)

    def move(self, src: int, dst: int) -> None:
        """Row `src`'s slots become row `dst`'s (the end of a run packs its last rows down, so that a step stops
        computing the free rows below them): a copy of that row's K/V, counted in `bytes_moved`."""
        for store in (self.keys, self.values):
            for i, t in enumerate(self.layer_types):
                buf = store[i]
                if buf is None:
                    continue
                n = min(buf.shape[2], self.written[src] + 1) if not self.is_sliding_type(t) else buf.shape[2]
                buf[dst, :, :n] = buf[src, :, :n]
                self.bytes_moved += buf[src, :, :n].numel() * buf.element_size()
        self.written[dst], self.written[src] = self.written[src], -1

    def reserve(self, positions: int) -> None:
        """Make room for positions 0..positions-1 in every row (grows the full layers by doubling)."""
        if positions > self.capacity:
            self._grow(positions)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.written) + 1

    # --- bookkeeping ---------------------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        """Double the capacity (rare: amortised over the writes that filled it). The full layers and the rings
        still below their size keep every position in the same slot, so the old slots are copied as they are."""
        new = max(need, 2 * self.capacity)
        for i, t in enumerate(self.layer_types):
            size = min(self.ring, new) if self.is_sliding_type(t) else new
            if self.keys[i] is None or self.keys[i].shape[2] >= size:
                continue
            for store in (self.keys, self.values):
                old = store[i]
                grown = old.new_zeros((*old.shape[:2], size, old.shape[3]))
                grown[:, :, : old.shape[2]] = old
                store[i] = grown
                self.bytes_moved += old.numel() * old.element_size()
        self.capacity = new

    def padding_waste(self, rows: list[int]) -> float:
        """Share of the full layers' attended slots that belong to no row (rows attend up to the longest)."""
        lengths = [self.written[r] + 1 for r in rows]
        if not lengths or max(lengths) <= 0:
            return 0.0
        return 1.0 - sum(lengths) / (len(lengths) * max(lengths))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class CanvasSlots:
    """What the layers of a compiled graph see as their cache: writes a block's K/V into slot rows `rows` (b,) of the
    buffers (None: rows 0..b-1) at `slots[t]` (b, n) and hands back every slot of those rows, so each layer's shapes
    are fixed by the buffers alone (masks hide what a row has not written). Rows 0..b-1 are a view; other rows (a
    compiled commit's) are gathered, one read of their K/V per layer, no other row touched; `whole`: the whole
    buffers (views) are handed back, for attention that picks each entry's rows itself. No host state."""

    def __init__(
        self,
        keys: list,
        values: list,
        layer_types: list[str],
        slots: dict,
        rows: torch.Tensor | None = None,
        whole: bool = False,
        spans: dict | None = None,
    ):
        self.keys, self.values, self.layer_types, self.slots, self.rows = keys, values, layer_types, slots, rows
        self.whole, self.spans = whole, spans or {}

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        t = self.layer_types[layer_idx]
        slots = self.slots[t]
        b, n = slots.shape
        rows = torch.arange(b, device=slots.device) if self.rows is None else self.rows
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[rows[:, None].expand(b, n), :, slots] = key_states.transpose(1, 2).to(k.dtype)
        v[rows[:, None].expand(b, n), :, slots] = value_states.transpose(1, 2).to(v.dtype)
        if t in self.spans:  # the slots attended: a view of the first ones
            k, v = k[:, :, : self.spans[t]], v[:, :, : self.spans[t]]
        if self.whole:
            return k, v
        return (k[:b], v[:b]) if self.rows is None else (k[self.rows], v[self.rows])


def slot_positions(highest: torch.Tensor, span: int, modulus: int) -> torch.Tensor:
    """(b, span) the position each of the first `span` slots holds (-1: empty) for rows whose highest written
    position is `highest` (b,), position p living in slot p mod `modulus`."""
    hi = highest[:, None]
    kp = hi - torch.remainder(hi - torch.arange(span, device=highest.device)[None, :], modulus)
    return torch.where(kp >= 0, kp, torch.full_like(kp, -1))


def _additive(seen: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill_(~seen, torch.finfo(dtype).min)
