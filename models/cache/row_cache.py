"""Per-row K/V of a masked block-diffusion decode in preallocated buffers, written in place (`context=cache`).

Row r of each layer's buffer (rows, kv_heads, capacity, head_dim) holds position p of its sequence in slot p.
A step runs, per row, the positions from the row's cached length to its current block's end (`plan`): the model's
attention hands the new K/V to `update`, which writes them into their slots (the step's only K/V copy) and returns
the rows' slots 0 .. span - 1 (a view when the rows are 0 .. b-1 in order; a gather otherwise). Committing is
moving a row's length forward: the committed positions' K/V were written by the step that ran them, and the
block's, written again every step, stay past the length. Keys are masked by position (slot = position), so
slots past a row's end (older blocks of a shorter row, a longer neighbour's span) are hidden, never read.

The cache speaks transformers' `Cache` interface (`update(keys, values, layer_idx)`, `get_seq_length`), so any
model whose attention layers take `past_key_values` and a 4D boolean mask runs on it. Every layer keeps all
positions: the 4D mask is the model's whole attention pattern (a sliding-window layer is not windowed here, as it
is not on the recompute path, which hands the model the same kind of mask).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class RowCache(Cache):
    """K/V slots for `rows` batch rows; `lengths[r]`: positions 0 .. lengths[r] - 1 of row r are cached."""

    def __init__(self, rows: int):
        super().__init__(layer_class_to_replicate=lambda: _RowLayer(self))
        self.lengths = [0] * rows
        self.select: slice | torch.Tensor = slice(0, rows)  # the step's rows in the buffers
        self.write: slice | tuple[torch.Tensor, torch.Tensor] = slice(0, 0)  # one shared slot range, or (row, slot)
        self.span = 0  # key slots the step attends: 0 .. span - 1
        self.need = 0  # slots the step writes up to (capacity)
        self.new = 0  # query columns of the step

    def plan(self, rows: list[int], pads: list[int], width: int, device: torch.device) -> None:
        """The step: row rows[i] runs `width` query columns, the first pads[i] of them padding (left), the rest
        its positions lengths[row] onward. A padding column's K/V go to a slot past the row's end."""
        b, lens = len(rows), [self.lengths[r] for r in rows]
        contiguous = rows == list(range(rows[0], rows[0] + b))
        self.select = slice(rows[0], rows[0] + b) if contiguous else torch.tensor(rows, device=device)
        self.new, self.span = width, max(n + width - p for n, p in zip(lens, pads, strict=True))
        self.need = max(lens) + width
        if contiguous and not any(pads) and len(set(lens)) == 1:
            self.write = slice(lens[0], lens[0] + width)
            return
        slots = [
            [n + width - p + i if i < p else n + i - p for i in range(width)] for n, p in zip(lens, pads, strict=True)
        ]
        self.write = (torch.tensor(rows, device=device)[:, None], torch.tensor(slots, device=device))

    def advance(self, rows: list[int], counts: list[int]) -> None:
        """Rows' positions now final (their K/V written by this step): their lengths move past them."""
        for r, n in zip(rows, counts, strict=True):
            self.lengths[r] += n

    def release(self, row: int) -> None:
        self.lengths[row] = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Key slots before the step's queries' own (the cached length, for rows that run no padding)."""
        return self.span - self.new


class _RowLayer(CacheLayerMixin):
    """One layer's buffers; the step's geometry is its `RowCache`'s."""

    is_sliding = False

    def __init__(self, owner: RowCache):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        shape = (len(self.owner.lengths), key_states.shape[1], 0, key_states.shape[3])
        self.keys, self.values = key_states.new_zeros(shape), value_states.new_zeros(shape)
        self.is_initialized = True

    def _grow(self, need: int) -> None:
        """Capacity doubles (an amortised copy); zeros, so a hidden slot never holds a NaN that masking would keep."""
        cap = max(need, 2 * self.keys.shape[2], 64)
        grow = lambda x: torch.cat([x, x.new_zeros(*x.shape[:2], cap - x.shape[2], x.shape[3])], dim=2)  # noqa: E731
        self.keys, self.values = grow(self.keys), grow(self.values)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        own = self.owner
        if own.need > self.keys.shape[2]:
            self._grow(own.need)
        if isinstance(own.write, slice):
            self.keys[own.select, :, own.write] = key_states
            self.values[own.select, :, own.write] = value_states
        else:
            row, slot = own.write
            self.keys[row, :, slot] = key_states.transpose(1, 2)
            self.values[row, :, slot] = value_states.transpose(1, 2)
        return self.keys[own.select, :, : own.span], self.values[own.select, :, : own.span]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.span, 0

    def get_seq_length(self) -> int:
        return self.owner.span - self.owner.new

    def get_max_length(self) -> int:
        return -1
