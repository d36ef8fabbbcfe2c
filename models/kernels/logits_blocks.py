"""The two vocabulary-sized matmuls of a denoising step, over all of a batch's canvas positions at once.

The self-conditioning signal (softmax of the previous step's logits @ the embedding matrix) and the LM head
(hidden @ lm_head.weight.T) each read a V x H weight (262,144 x 2,816, 1.48 GB in bf16 for the released
model, and the same tensor when the embeddings are tied). Run one batch row (and one 64 MiB block of its
positions) at a time, as before, the weight is read 2 x B x 4 times per step at C = 256; that traffic, not
the flops, bounds the step at batch 32. Here the (row, position) pairs that need the matmul are flattened
into one list of positions and cut into as few blocks as a memory budget allows, so the weight is read once
per step whenever its block fits, and a constant number of times otherwise (the budget is proportional to
U, one float32 B x C x V tensor, as the transient is).

The transient is what a block materialises besides the caller's tensors: the matmul operand (the
probabilities in the weight dtype) or result (logits in the weight dtype, when `out` has another dtype),
plus the float32 softmax of one chunk. Where the caller's `out` is free scratch (it is overwritten by the
LM head anyway) the probabilities are written into its storage and cost nothing; where the result can be
written straight into `out` it costs nothing either. So in the decode engine the weight is read exactly
once per step for each matmul at any batch size (see `denoise`), and the extra memory stays within the
1.5 U that `models.planning.memory` plans for (the workspace, 1 U, plus at most `budget_bytes`).

Numerics are transformers' (softmax in float32 of the model-dtype logits, cast back to the weight dtype,
matmul, times embed_scale); the softmax runs per position, so chunking does not change it. A matmul over
more rows may round differently: on the CPU the tiny models' logits are bit-identical to the per-row path at
the default budget, while at K = 262,144 a row's float32 signal moves by ~1e-6 with the batch (less than its
float32 error; tests/test_logits_blocks.py), which no engine test's tokens notice.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# Extra memory a block may hold, as a fraction of U (one float32 B x C x V tensor of this call): with the
# logits workspace (1 U) the step stays within the 1.5 U that models.planning.memory plans for.
BUDGET_U = 0.5
# The float32 softmax of the self-conditioning input runs in chunks of positions of at most this many bytes
# (it only has to be big enough to amortise the op overhead; it does not change the number of weight reads).
SOFTMAX_CHUNK_BYTES = 64 << 20


def budget_bytes(rows: int, canvas: int, vocab: int) -> int:
    """The transient allowed per block: `BUDGET_U` x U, U = rows x canvas x vocab x 4 bytes.

    Proportional to U so that the number of blocks (and of weight reads) does not grow with the batch:
    the whole batch's positions need about ceil(bytes per position and vocabulary entry / (4 BUDGET_U))
    blocks whatever B is, and one block when the result or operand can live in the caller's workspace."""
    return int(BUDGET_U * rows * canvas * vocab * 4)


def _fit(budget: int, per_position: int, limit: int) -> int:
    """Positions per block under `budget` bytes at `per_position` bytes each: at least 1, at most `limit`."""
    if per_position <= 0:
        return max(1, limit)
    return max(1, min(limit, budget // per_position))


def _spans(rows: list[int], c: int, lo: int, hi: int) -> Iterator[tuple[int, int, int, int]]:
    """(row, start, stop, k) for the flattened positions [lo, hi), where flat position k = j * c + p is
    position p of row rows[j]: one slice per batch row the range touches."""
    k = lo
    while k < hi:
        j, p = divmod(k, c)
        stop = min(c, p + hi - k)
        yield rows[j], p, stop, k
        k += stop - p


def _scratch(free: torch.Tensor | None, sc: torch.Tensor, dtype: torch.dtype, n: int, v: int) -> torch.Tensor | None:
    """An (n, v) `dtype` view of the storage of `free` (a tensor about to be overwritten), or None.

    Usable when `free` is contiguous and large enough, and either does not share storage with `sc` or is
    `sc` itself: then the probabilities are compacted forward in place (flat position k goes to slot
    k' <= k, in ascending order, each chunk read before it is written, and the weight dtype is no wider than
    `sc`'s), so no position is overwritten before it is read."""
    if free is None or not free.is_contiguous() or free.numel() == 0:
        return None
    size = dtype.itemsize
    if free.numel() * free.element_size() < n * v * size or (free.storage_offset() * free.element_size()) % size:
        return None
    if free.untyped_storage().data_ptr() == sc.untyped_storage().data_ptr():
        same = free.data_ptr() == sc.data_ptr() and free.shape == sc.shape and free.dtype == sc.dtype
        if not (same and sc.is_contiguous() and size <= sc.element_size()):
            return None
    return free.view(-1).view(torch.uint8)[: n * v * size].view(dtype).view(n, v)


def self_conditioning_into(
    soft: torch.Tensor,
    sc: torch.Tensor,
    rows: list[int],
    weight: torch.Tensor,
    scale: torch.Tensor,
    budget: int,
    free: torch.Tensor | None = None,
) -> torch.Tensor:
    """soft[i] = softmax(sc[i] in the weight dtype, in float32) in the weight dtype @ weight x scale, for i in
    `rows` (the other rows of `soft` are left as they are: zeros from the caller).

    All rows' positions go through one matmul per block, so the (V, H) weight is read once per block: once
    when the probabilities can be written into `free` (the caller's output buffer, dead until the LM head
    writes it; it may be `sc` itself), else in blocks of `budget` bytes (probabilities plus one softmax
    chunk). `sc` is read only, except through `free` when `free` is `sc`."""
    _, c, v = sc.shape
    n = len(rows) * c
    if n == 0:
        return soft
    wsize = weight.element_size()
    # a chunk holds the float32 softmax, its float32 input (the CPU kernel upcasts a half input first) and the
    # input's cast to the weight dtype; it gets a quarter of the budget, the probabilities the rest
    upcast = 4 if weight.dtype != torch.float32 else 0
    per_chunk_pos = v * (4 + upcast + (wsize if sc.dtype != weight.dtype else 0))
    chunk = _fit(min(SOFTMAX_CHUNK_BYTES, budget // 4), per_chunk_pos, c)
    buf = _scratch(free, sc, weight.dtype, n, v)
    block = n if buf is not None else _fit(budget - chunk * per_chunk_pos, v * wsize, n)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        probs = buf[lo:hi] if buf is not None else torch.empty((hi - lo, v), dtype=weight.dtype, device=sc.device)
        for i, p0, p1, k in _spans(rows, c, lo, hi):
            for q in range(p0, p1, chunk):
                q1 = min(p1, q + chunk)
                dst = probs[k - lo + q - p0 : k - lo + q1 - p0]
                dst.copy_(sc[i, q:q1].to(weight.dtype).softmax(dim=-1, dtype=torch.float32))
        signal = torch.matmul(probs, weight) * scale
        del probs
        for i, p0, p1, k in _spans(rows, c, lo, hi):
            soft[i, p0:p1] = signal[k - lo : k - lo + p1 - p0]
    return soft


def lm_head_into(out: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor, budget: int) -> torch.Tensor:
    """out (B, C, V), any float dtype, = hidden (B, C, H) @ weight.T, all rows' positions in one matmul per block.

    When `out` has the weight's dtype and its (B, C) dimensions flatten, the matmul writes straight into it:
    one read of the weight and no transient. Otherwise each block's result (in the weight dtype) is copied into
    `out`, in blocks of `budget` bytes of that result."""
    b, c, v = out.shape
    n = b * c
    h = hidden.reshape(n, hidden.shape[-1])
    try:
        flat = out.view(n, v)
    except RuntimeError:
        flat = None
    if flat is not None and out.dtype == weight.dtype:
        torch.matmul(h, weight.t(), out=flat)
        return out
    block = _fit(budget, v * weight.element_size(), n)
    rows = list(range(b))
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        x = torch.matmul(h[lo:hi], weight.t())
        if flat is not None:
            flat[lo:hi].copy_(x)
        else:
            for i, p0, p1, k in _spans(rows, c, lo, hi):
                out[i, p0:p1].copy_(x[k - lo : k - lo + p1 - p0])
        del x
    return out
