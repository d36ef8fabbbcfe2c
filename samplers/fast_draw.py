"""Fast exact draws for one denoising step: `draw_fast`, same contract as `samplers.draw.draw_exact`.

Why it is fast on DiffusionGemma-size logits (B x 256 x 262,144 float32): transformers' path builds
the full softmax, runs `multinomial` (a cumulative sum over the whole vocabulary per position) and
`Categorical(...).entropy()` (another log-softmax and product), each streaming gigabytes through
memory. Here the vocabulary is cut into chunks of K tokens (K ~ sqrt(V), 512 for 262,144) and each
canvas position is processed in cache-sized row blocks with reused buffers:
- one pass gives chunk maxima (so the row max and the argmax's chunk),
- `exp(x - max)` once, whose chunk sums give the normaliser Z and whose product with `x - max`
  gives the entropy `log Z - sum(e * (x - max)) / Z`; the confidence is `1 / Z`;
- sampling is inverse-CDF with one uniform per position, done in two levels: pick a chunk from the
  chunk sums' cumulative sum, then a token inside that chunk (K values recomputed from the logits).
  Cumulative sums run in float64, so the draw is exact softmax sampling up to float rounding of the
  probabilities themselves (the same as `torch.multinomial`).

Threads (CPU): the caller's intra-op threads become block workers, each running its ops single-threaded.
On a shared machine a multi-threaded op waits for its slowest core at every barrier; with hundreds of
small ops per call that made 2-thread OpenMP ~20x slower under load than workers that never sync.

Randomness: the caller passes one float64 uniform per position (counter-based streams, `samplers.streams`).
Every block is a slice of one batch row with a shape fixed by (C, V) alone, so row i of a batch gives
bit-identical results to row i alone (batch invariance). `draw_whole` runs the same maths on the whole
tensor at once, with no threads or Python loops: the form `torch.compile(fullgraph=True)` captures.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from samplers.draw import StepDraw, inverse_cdf

# Bytes of one row block's working buffer: ~2 MiB keeps the block plus its two buffers in L2/L3.
BLOCK_BYTES = 2 << 20
# Canvas size (C * V) from which row blocks go to a thread pool; tiny vocabularies run inline.
POOL_MIN_ELEMENTS = 1 << 22
# Values of `x - max` below this have exp == 0 in float32; clamping keeps 0 * (-inf) out of the entropy.
_MIN_SHIFTED = -1000.0


def chunk_size(vocab: int) -> int:
    """Power of two near sqrt(V): both levels of the inverse-CDF search stay small (512 for 262,144)."""
    return max(1, 1 << math.ceil(math.log2(max(1.0, math.sqrt(vocab)))))


def rows_per_block(vocab: int, canvas: int, device: torch.device | str = "cpu") -> int:
    """Canvas positions per block; depends on (V, C, device) only, never on the batch (batch invariance).

    On CPU a block fits in cache; on an accelerator a whole canvas is one block (launches, not bandwidth, dominate).
    """
    if torch.device(device).type != "cpu":
        return canvas
    return max(1, min(canvas, BLOCK_BYTES // (4 * vocab)))


class _Workspace(threading.local):
    """Per-thread reused block buffers: fresh multi-MB allocations page-fault on every call and cost more than
    the maths."""

    def __init__(self) -> None:
        self.shape: tuple[int, int] | None = None
        self.shifted = torch.empty(0)
        self.expd = torch.empty(0)

    def get(self, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.shape != (rows, width):
            self.shifted = torch.empty(rows, width)
            self.expd = torch.empty(rows, width)
            self.shape = (rows, width)
        return self.shifted, self.expd


_WORKSPACE = _Workspace()
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """Block workers, one intra-op thread each: no per-op barrier across cores, so a core busy with another
    process slows one worker instead of stalling every op (2-thread OpenMP ops were ~20x slower under load)."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="fast_draw", initializer=torch.set_num_threads, initargs=(1,)
        )
    return _POOLS[workers]


def _reduce_block(
    xb: torch.Tensor, k: int, shifted: torch.Tensor | None = None, expd: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a (R, V) block: chunk maxima, row max, chunk sums of exp(x - max), and sum(e * (x - max)).

    With `shifted` / `expd` buffers the block works in place in them; without, it allocates (compile path)."""
    r, v = xb.shape
    n_full = v // k
    full = xb[:, : n_full * k].reshape(r, n_full, k)
    cmax = full.amax(-1)
    if n_full * k < v:
        cmax = torch.cat([cmax, xb[:, n_full * k :].amax(-1, keepdim=True)], dim=1)
    m = cmax.amax(-1, keepdim=True)
    if shifted is None or expd is None:
        shifted = (xb - m).clamp(min=_MIN_SHIFTED)
        expd = torch.exp(shifted)
    else:
        torch.sub(xb, m, out=shifted)
        shifted.clamp_(min=_MIN_SHIFTED)
        torch.exp(shifted, out=expd)
    csum = expd[:, : n_full * k].reshape(r, n_full, k).sum(-1)
    if n_full * k < v:
        csum = torch.cat([csum, expd[:, n_full * k :].sum(-1, keepdim=True)], dim=1)
    shifted.mul_(expd)
    return cmax, m.squeeze(-1), csum, shifted.sum(-1)


def _gather_chunk(
    x: torch.Tensor, chunk: torch.Tensor, k: int, fill: float, source: tuple | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) values of chunk `chunk[n]` of each row of x (N, V) (the ragged tail padded with `fill`), and their
    token ids. `source` = (raw (N, V), process): x is process(raw), so the chunk is recomputed from raw."""
    n, v = x.shape
    ids = chunk[:, None] * k + torch.arange(k, device=x.device)[None, :]
    valid = ids < v
    if source is None:
        vals = torch.gather(x, 1, ids.clamp(max=v - 1))
    else:
        raw, process = source
        vals = process(torch.gather(raw, 1, ids.clamp(max=v - 1)))
    return vals.masked_fill(~valid, fill), ids


def draw_fast(logits: torch.Tensor, u: torch.Tensor) -> StepDraw:
    """Sample, argmax, entropy (nats) and max probability from temperature-scaled logits (B, C, V).

    `sampled` is the inverse-CDF token of softmax(logits) for the uniform `u` (B, C) of each position.
    Results match `draw_exact` to float tolerance. On CPU the caller's intra-op threads become block
    workers; every op itself runs single-threaded (small multi-threaded ops wait a scheduler slice
    whenever another process holds a core).
    """
    if logits.device.type != "cpu":
        return draw_whole(logits, u)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _draw_blocks(logits, u, workers=threads)
    finally:
        torch.set_num_threads(threads)


def draw_whole(logits: torch.Tensor, u: torch.Tensor, raw: torch.Tensor | None = None, process=None) -> StepDraw:
    """`draw_fast`'s maths on the whole (B*C, V) tensor in one go: no threads, no Python loops (compiles).

    `raw` (B, C, V) and `process` (elementwise over (B*C, K) chunks of flat rows): `logits` is process(raw), and the
    two chunks per position that the argmax and the inverse-CDF search read again are recomputed from `raw`. Then
    nothing after the reductions reads `logits`, so a compiled graph fuses the processing into them and never
    writes the processed (B, C, V) tensor (one read of the raw logits per step)."""
    b, c, v = logits.shape
    flat = logits.float().reshape(b * c, v)
    k = min(chunk_size(v), v)
    cmax, rmax, csum, plogp = _reduce_block(flat, k)
    source = None if raw is None else (raw.reshape(b * c, v), process)
    return _finish(flat, k, cmax, rmax, csum, plogp, u, (b, c), source)


def _draw_blocks(logits: torch.Tensor, u: torch.Tensor, workers: int) -> StepDraw:
    b, c, v = logits.shape
    x = logits.detach()
    if x.dtype != torch.float32:
        x = x.float()
    x = x.contiguous()
    k = min(chunk_size(v), v)
    n_chunks = -(-v // k)
    rows = rows_per_block(v, c, x.device)
    flat = x.view(b * c, v)
    cmax = torch.empty(b * c, n_chunks, device=x.device)
    csum = torch.empty(b * c, n_chunks, device=x.device)
    rmax = torch.empty(b * c, device=x.device)
    plogp = torch.empty(b * c, device=x.device)
    # blocks never straddle batch rows: their shapes depend on (C, V) only
    spans = [(i * c + j, i * c + min(j + rows, c)) for i in range(b) for j in range(0, c, rows)]

    def run(part: list[tuple[int, int]]) -> None:
        for lo, hi in part:
            s_buf, e_buf = (t[: hi - lo] for t in _WORKSPACE.get(rows, v))
            cm, m, cs, sp = _reduce_block(flat[lo:hi], k, s_buf, e_buf)
            cmax[lo:hi], rmax[lo:hi], csum[lo:hi], plogp[lo:hi] = cm, m, cs, sp

    # workers only pay off on big canvases; deciding from (C, V) alone keeps results batch-invariant
    workers = min(workers, len(spans)) if c * v >= POOL_MIN_ELEMENTS else 1
    if workers <= 1:
        run(spans)
    else:
        step = -(-len(spans) // workers)
        futures = [_pool(workers).submit(run, spans[w * step : (w + 1) * step]) for w in range(workers)]
        for f in futures:
            f.result()
    return _finish(flat, k, cmax, rmax, csum, plogp, u, (b, c))


def _finish(flat, k, cmax, rmax, csum, plogp, u, shape, source: tuple | None = None) -> StepDraw:
    """From the chunk statistics: argmax, entropy, confidence and the two-level inverse-CDF sample (`source`: see
    `_gather_chunk`)."""
    # argmax: first chunk holding the row max, then the first max inside it (torch.argmax's tie rule)
    best_chunk = cmax.argmax(-1)
    vals, ids = _gather_chunk(flat, best_chunk, k, float("-inf"), source)
    argmax = ids.gather(1, vals.argmax(-1, keepdim=True)).squeeze(1)

    cum = csum.double().cumsum(-1)
    z = cum[:, -1]
    entropy = (z.log() - plogp.double() / z).float()
    confidence = (1.0 / z).float()

    # inverse CDF, one uniform per position: pick the chunk, then the token inside it
    target = u.reshape(-1).double() * z
    chunk = inverse_cdf(cum, target)
    before = torch.where(chunk > 0, cum.gather(1, (chunk - 1).clamp(min=0)[:, None]).squeeze(1), torch.zeros_like(z))
    vals, ids = _gather_chunk(flat, chunk, k, float("-inf"), source)
    inner = torch.exp((vals - rmax[:, None]).clamp(min=_MIN_SHIFTED)).double().cumsum(-1)
    pos = inverse_cdf(inner, target - before)
    sampled = ids.gather(1, pos[:, None]).squeeze(1)
    return StepDraw(sampled.view(shape), argmax.view(shape), entropy.view(shape), confidence.view(shape))
