"""Cache maintenance at the released attention shapes: bytes copied per commit and per admission, vs bytes written.

B = 32 rows whose contexts are drawn from 1k..32k tokens (seeded), the released K/V shapes (sliding layers: 8 K/V
heads x 256, window 1,024; full layers: 2 K/V heads x 512), bfloat16, canvas 256, on a twin of 6 layers (5
sliding + 1 full: the released 5:1 pattern; bytes per layer scale with the layer count, the ratios do not) with
narrow widths elsewhere. The contexts are set straight into the slots (setup, not measured); a commit is a real
encoder forward of k rows' canvases through `DiffusionGemmaAdapter.commit`, an admission a real prefill of one
released row through `DiffusionGemmaAdapter.prefill`.

A dispatch-mode counter watches every aten op of the measured call: bytes written into the cache's storage, and
bytes copied out of it (any op other than attention / matmuls that reads the cache's storage and returns new
storage: a gather, concatenation, pad or `contiguous`). Attention that reads the slots in place is no copy. The
copy transformers' `sdpa` makes to expand grouped K/V heads for a masked call (`repeat_kv`: 2x the span on the
sliding layers, 8x on the full ones, in every forward, `generate()`'s included) belongs to the attention kernel,
not to cache maintenance: it is reported apart (`gqa_expand_bytes`). The engine's attention stacks each K/V head's
query heads instead (`models.cache.slot_attention.gqa_packed_sdpa`), so it reads the slots without it: 0.

Before, the right-aligned `DynamicCache` (`models/kv_rows.py`, removed with this change): a commit by k rows
copied those rows out (`take`), padded every row of every layer by C on the left (`pad_left`), and copied the k
rows back (`put`): (2k + B) rows of the cache, padded to the longest context, per commit. That figure is
arithmetic over the same contexts from those three ops, not a measurement.

    python -m bench.cpu.cache_copies [--quick] [--out-dir outputs/bench]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench.cpu.common import OUT_DIR, machine_info, print_machine, table, write_json

FULL = {"rows": 32, "contexts": (1024, 32768), "admit": 2048, "commits": (1, 2, 4, 8)}
QUICK = {"rows": 8, "contexts": (300, 2000), "admit": 512, "commits": (1, 6)}
IN_PLACE = ("scaled_dot_product", "mm", "matmul", "linear")  # read the slots where they are


class CacheTraffic(TorchDispatchMode):
    """Bytes written into and copied out of the tensors `cache` holds, over every aten op while active."""

    def __init__(self, cache):
        super().__init__()
        self.storages = {t.untyped_storage().data_ptr() for t in cache.keys + cache.values if t is not None}
        self.written = self.copied = self.expanded = 0
        self.copy_ops: dict[str, int] = {}

    def _ours(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in self.storages

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func._schema.is_mutable and inputs and self._ours(inputs[0]):
            dest = inputs[0]
            sources = [t for t in inputs[1:] if t.dtype == dest.dtype and t.numel() < dest.numel()]
            self.written += max((t.numel() * t.element_size() for t in sources), default=0)
        elif not any(k in name for k in IN_PLACE) and any(self._ours(t) for t in inputs):
            gqa = any(self._ours(t) and 0 in t.stride() for t in inputs)  # repeat_kv: an expanded view, cloned
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and not self._ours(t):
                    n = t.numel() * t.element_size()
                    if gqa:
                        self.expanded += n
                        continue
                    self.copied += n
                    self.copy_ops[name] = self.copy_ops.get(name, 0) + n
        return out


def build():
    """The real-shaped twin's adapter: released attention shapes and window, 6 layers (5 sliding + 1 full)."""
    from bench.cpu.plan_twins import build_twin
    from bench.cpu.released_model import FULL_TEXT

    layers = ["sliding_attention"] * 5 + ["full_attention"]
    text = {"num_hidden_layers": 6, "layer_types": layers, "sliding_window": FULL_TEXT["sliding_window"]}
    return build_twin(torch.bfloat16, vocab=512, text=text)


def fill(adapter, rows: int, contexts: list[int], grow: int):
    """A state whose row r holds a context of contexts[r] positions (zero K/V: the bytes, not the values, count)."""
    state = adapter.open(rows)
    cache = state.cache
    c = cache.max_chunk
    cache.reserve(max(contexts) + grow + c)
    cache.begin(None, [0] * rows, 1)  # allocate every layer's buffer through the layers' own write path
    with torch.no_grad():
        adapter.model.model.encoder(
            input_ids=torch.zeros((rows, 1), dtype=torch.long),
            attention_mask=cache.masks(torch.zeros((rows, 1), dtype=torch.long), adapter.dtype),
            past_key_values=cache,
            position_ids=torch.zeros((rows, 1), dtype=torch.long),
        )
    for r, n in enumerate(contexts):
        cache.written[r], state.lengths[r] = n - 1, n
    return state


def kv_bytes_per_token(cache) -> tuple[int, int]:
    """(full layers, sliding layers) K/V bytes per token per row."""
    full = sliding = 0
    for t, k in zip(cache.layer_types, cache.keys, strict=True):
        per = 2 * k.shape[1] * k.shape[3] * k.element_size()
        if cache.is_sliding_type(t):
            sliding += per
        else:
            full += per
    return full, sliding


def before_commit_bytes(contexts: list[int], k: int, window: int, full: int, sliding: int) -> int:
    """What the right-aligned cache copied per commit of k rows: take (k rows) + pad_left (all rows) + put (k
    rows), each row padded to the longest context (sliding layers hold its last window - 1)."""
    width = max(contexts)
    row = width * full + min(width, window - 1) * sliding
    return (2 * k + len(contexts)) * row


def _event(name: str, contexts: list[int], new: int, traffic: CacheTraffic, before: int) -> dict[str, Any]:
    return {
        "event": name,
        "contexts": contexts,
        "new_kv_bytes": new,
        "written_bytes": traffic.written,
        "copied_bytes": traffic.copied,
        "copied_per_new": traffic.copied / new,
        "before_copied_bytes": before,
        "before_copied_per_new": before / new,
        "gqa_expand_bytes": traffic.expanded,
        "copy_ops": traffic.copy_ops,
    }


def run(quick: bool = False, out_dir: str | Path | None = None, quiet: bool = False) -> dict[str, Any]:
    cfg = QUICK if quick else FULL
    torch.manual_seed(0)
    rng = random.Random(0)
    b = cfg["rows"]
    contexts = [rng.randint(*cfg["contexts"]) for _ in range(b)]
    adapter = build()
    c = adapter.canvas_length
    state = fill(adapter, b, contexts, grow=c * (1 + len(cfg["commits"])))
    cache = state.cache
    full, sliding = kv_bytes_per_token(cache)
    window = cache.window
    rows_out = []
    order = sorted(range(b), key=lambda r: -contexts[r])  # the longest contexts commit: the worst case
    for k in cfg["commits"]:
        rows = sorted(order[:k])
        lengths = [state.lengths[r] for r in rows]
        with CacheTraffic(cache) as traffic:
            adapter.commit(state, torch.randint(3, 500, (k, c)), rows)
        before = before_commit_bytes(contexts, k, window, full, sliding)
        rows_out.append(_event(f"commit k={k}", lengths, k * c * (full + sliding), traffic, before))
    # an admission: the longest row leaves, a new prompt is prefilled into its slot row; before, a prefill into
    # a fresh cache then `concat` with the batch, right-aligned to the longest context (every row rewritten)
    r = order[0]
    adapter.release(state, [r])
    prompt = [5 + j % 400 for j in range(cfg["admit"])]
    with CacheTraffic(cache) as traffic:
        adapter.prefill([prompt], state, [r])
    before = (b + 1) * (max(contexts) * full + min(max(contexts), window - 1) * sliding)
    name = f"admission ({len(prompt)}-token prompt)"
    rows_out.append(_event(name, [len(prompt)], len(prompt) * (full + sliding), traffic, before))
    payload = {
        "machine": machine_info(),
        "rows": b,
        "contexts": contexts,
        "canvas": c,
        "kv_bytes_per_token": {"full": full, "sliding": sliding, "layers": "5 sliding + 1 full (twin)"},
        "cache_bytes": cache.nbytes(),
        "padding_waste": cache.padding_waste(list(range(b))),
        "events": rows_out,
    }
    path = write_json("cache_copies", payload, Path(out_dir) if out_dir else OUT_DIR)
    if not quiet:
        print_machine(payload["machine"])
        gib = cache.nbytes() / 2**30
        print(f"B={b}, contexts {min(contexts)}..{max(contexts)} tokens, canvas {c}, cache {gib:.2f} GiB")
        cols = ["event", "new_kv_bytes", "written_bytes", "copied_bytes", "copied_per_new", "before_copied_per_new"]
        cols.append("gqa_expand_bytes")
        print(table(rows_out, cols))
        print(f"wrote {path} (before: arithmetic from the removed right-aligned cache's ops, not measured)")
    return payload


def summary_rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for `bench.cpu.run_all`'s table: bytes copied per event, before (arithmetic) and now (measured)."""
    return [
        {
            "bench": "cache_copies",
            "setting": f"{e['event']}, B={p['rows']}",
            "reference": f"{e['before_copied_per_new']:.1f}x new",
            "ours": f"{e['copied_per_new']:.1f}x new",
            "ratio": "n/a",
            "note": f"copied / new K/V ({e['new_kv_bytes'] / 2**20:.0f} MiB); before: right-aligned cache (arithmetic)",
        }
        for e in p["events"]
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    return run(a.quick, a.out_dir)


if __name__ == "__main__":
    main()
