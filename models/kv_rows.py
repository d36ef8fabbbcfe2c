"""Row surgery on a transformers `DynamicCache`: drop rows, admit rows, grow some rows, trim padding.

The continuous-batching engine keeps every row's context right-aligned in one cache (left padding,
masked out), so slot distances equal position distances for every row and sliding-window layers stay
correct. Widths are tracked on the host (`lengths`), so none of these operations reads the device.
Full-attention layers hold all `width` slots; sliding-window layers hold the last `window - 1` of them
(transformers' `DynamicSlidingWindowLayer`), which every operation here preserves.
"""

from __future__ import annotations

import copy

import torch


def width(cache) -> int:
    """Slots per row (the cumulative length the masks are built from)."""
    return cache.get_seq_length()


def _held(layer, total: int) -> int:
    """How many of `total` slots a layer keeps (all, or the last window - 1 for sliding layers)."""
    window = getattr(layer, "sliding_window", None)
    return total if window is None else min(total, window - 1)


def _set_total(layer, total: int) -> None:
    if hasattr(layer, "cumulative_length"):
        layer.cumulative_length = total


def pad_left(cache, n: int) -> None:
    """Prepend `n` (masked) slots to every row, in place."""
    if n <= 0:
        return
    total = width(cache) + n
    for layer in cache.layers:
        keep = _held(layer, total)
        for name in ("keys", "values"):
            t = getattr(layer, name)
            pad = t.new_zeros((*t.shape[:2], n, t.shape[3]))
            setattr(layer, name, torch.cat([pad, t], dim=2)[:, :, -keep:] if keep else t[:, :, :0])
        _set_total(layer, total)


def trim_left(cache, n: int) -> None:
    """Drop the first `n` slots of every row (they must be padding for all rows), in place."""
    if n <= 0:
        return
    total = width(cache) - n
    for layer in cache.layers:
        keep = _held(layer, total)
        for name in ("keys", "values"):
            t = getattr(layer, name)
            setattr(layer, name, t[:, :, t.shape[2] - keep :])
        _set_total(layer, total)


def select(cache, rows: torch.Tensor) -> None:
    """Keep only `rows` (a device index tensor), in place."""
    cache.batch_select_indices(rows)


def take(cache, rows: torch.Tensor):
    """A new cache holding copies of `rows`; the original is untouched."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        new.keys, new.values = layer.keys[rows], layer.values[rows]
        out.layers.append(new)
    return out


def put(cache, rows: torch.Tensor, part) -> None:
    """Write the rows of `part` (same width) into `rows` of `cache`, in place."""
    for layer, src in zip(cache.layers, part.layers, strict=True):
        layer.keys = layer.keys.index_copy(0, rows, src.keys)
        layer.values = layer.values.index_copy(0, rows, src.values)


def concat(a, b):
    """Rows of `a` then rows of `b`, both right-aligned to the wider width; returns `a` (modified)."""
    wa, wb = width(a), width(b)
    pad_left(a, wb - wa)
    pad_left(b, wa - wb)
    for la, lb in zip(a.layers, b.layers, strict=True):
        la.keys = torch.cat([la.keys, lb.keys], dim=0)
        la.values = torch.cat([la.values, lb.values], dim=0)
    return a


def release_views(cache) -> None:
    """Sliding layers keep a view of the last window - 1 slots of a larger concatenation, which pins the whole
    concatenation (a long prompt's K/V for every sliding layer): copy such views so the rest can be freed."""
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)
            if t is not None and t.numel() and t.untyped_storage().nbytes() > 2 * t.numel() * t.element_size():
                setattr(layer, name, t.clone())
