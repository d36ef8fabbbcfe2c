"""A fused Triton kernel for one denoising step's draws: `fused_draw(raw, temperature, u, softcap)`.

Why it exists: at DiffusionGemma scale one step's logits are B x 256 x 262,144 (1 GiB of float32 per
batch row of canvases). transformers' sampling path applies the soft cap and the temperature (one
full-size tensor each), builds the softmax, runs `multinomial` (a cumulative sum over the whole
vocabulary per position) and `Categorical(...).entropy()` (another log-softmax and product), so the
whole B*C*V tensor streams through memory several times and several same-size temporaries are
allocated. This kernel reads each row of raw LM-head logits once for every reduction, plus the K
logits of one chunk for the draw, and writes nothing of size V except the optional processed logits
(`processed_out`, the self-conditioning input of the next step).

Per row, with x = softcap * tanh(raw / softcap) / temperature, computed in float32:
- pass 1 streams the row in tiles of K tokens (K = `chunk_size(V)`, a power of two near sqrt(V):
  512 for 262,144). Each tile is one chunk of the two-level inverse CDF. Per chunk the program keeps
  its max m_c, s_c = sum(exp(x - m_c)) and w_c = sum(exp(x - m_c) * (x - m_c)) in registers (vectors
  of next_pow2(ceil(V / K)) entries, 512 at full scale) and the running argmax (first index of the
  max: torch.argmax's tie rule). The optional `processed_out` tile is written in the same pass.
- stage 2 works on the chunk vectors only: row max M, chunk weights exp(m_c - M) * s_c, their
  cumulative sum in float64 (whose total is Z), entropy log Z - W / Z with
  W = sum over chunks of exp(m_c - M) * (w_c + (m_c - M) * s_c), confidence 1 / Z (max probability).
- the draw: the target u * Z picks the first chunk whose cumulative weight exceeds it (clamped to the
  last chunk with positive mass), then that chunk's K logits are read again and the token is picked
  the same way inside it: float64 cumulative sum of exp(x - m_c) (the very terms pass 1 summed),
  against the residual target rescaled by exp(M - m_c); clamped to the chunk's last token with
  positive mass. Tokens of probability 0 (raw logit -inf) are never drawn: a zero term never lifts a
  cumulative sum past the target, and both clamps land on positive mass.

A program handles `rows` canvas positions at once as a (rows, K) tile: 1 at full scale on a GPU (the
canvas alone gives B*256 programs), more for small vocabularies and in the interpreter, whose cost is
per operation rather than per element.

Masking: a raw logit of -inf stays -inf through the soft cap (mathematically softcap * tanh(-inf) is
-softcap, a small but positive probability; here -inf is a mask). A row with no finite logit has no
distribution: it gets sampled = argmax = 0, entropy NaN, confidence 0. tanh is computed from exp (with
a short odd polynomial near 0), so the kernel only uses core `tl` maths and runs unchanged on CUDA,
ROCm and in the interpreter.

`TRITON_INTERPRET=1` runs the kernel on CPU tensors (slow, for tests). Triton reads that flag when a
`@triton.jit` function is defined, so it must be set before this module is first imported. The triton
import is guarded: without triton the module still imports, `available()` is False and `fused_draw`
raises a clear error.
"""

from __future__ import annotations

import math
import os

import torch

__all__ = ["available", "chunk_size", "fused_draw", "rows_per_program"]

# Smallest tile: keeps tl.arange sizes sane for toy vocabularies.
_MIN_CHUNK = 16

try:  # guarded: the module imports without triton; fused_draw then raises a clear error
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is a declared dependency
    triton = None
    tl = None

# triton reads TRITON_INTERPRET when a @triton.jit function is defined, i.e. when this module is imported
_KERNEL_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def available() -> bool:
    """True when triton imports and can run here: a CUDA (or ROCm) device, or TRITON_INTERPRET=1."""
    return triton is not None and (torch.cuda.is_available() or _KERNEL_INTERPRETED)


def chunk_size(vocab: int) -> int:
    """Power of two >= sqrt(V) (512 for 262,144), at least 16: both levels of the inverse CDF stay small."""
    return max(_MIN_CHUNK, 1 << math.ceil(math.log2(max(1.0, math.sqrt(vocab)))))


def _next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def rows_per_program(n_rows: int, k: int, n_chunks: int, interpret: bool = False) -> int:
    """Rows per program (power of two): tiles of about 512 elements on a GPU (1 row at K = 512), about
    32,768 in the interpreter (whose cost is per operation), never more than the rows there are."""
    width = max(k, _next_pow2(n_chunks))
    budget = 1 << 15 if interpret else 512
    return max(1, min(_next_pow2(n_rows), budget // width, 4096))


if triton is not None:

    @triton.jit
    def _tanh(y):
        # odd Taylor polynomial to y^9 near 0 (relative error < 1e-8 for |y| < 0.25), where
        # 1 - exp(-2|y|) cancels; (1 - t) / (1 + t) with t = exp(-2|y|) <= 1 elsewhere (never overflows)
        a = tl.abs(y)
        y2 = y * y
        poly = y * (1.0 + y2 * (-1.0 / 3.0 + y2 * (2.0 / 15.0 + y2 * (-17.0 / 315.0 + y2 * (62.0 / 2835.0)))))
        t = tl.exp(-2.0 * a)
        big = (1.0 - t) / (1.0 + t)
        big = tl.where(y < 0, -big, big)
        return tl.where(a < 0.25, poly, big)

    @triton.jit
    def _process(ptrs, mask, inv_temp, softcap, HAS_SOFTCAP: tl.constexpr):
        # x = softcap * tanh(raw / softcap) / temperature in float32; -inf (and padding) stays -inf
        r = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        if HAS_SOFTCAP:
            capped = softcap * _tanh(r / softcap)
            r = tl.where(r == float("-inf"), r, capped)
        return r * inv_temp

    @triton.jit
    def _fused_draw_kernel(
        raw_ptr,
        temp_ptr,
        u_ptr,
        out_ptr,
        sampled_ptr,
        argmax_ptr,
        entropy_ptr,
        conf_ptr,
        N,
        V,
        stride_raw,
        stride_out,
        softcap,
        K: tl.constexpr,
        NC: tl.constexpr,
        R: tl.constexpr,
        HAS_SOFTCAP: tl.constexpr,
        WRITE_OUT: tl.constexpr,
    ):
        rows = tl.program_id(0).to(tl.int64) * R + tl.arange(0, R)  # int64: row * stride passes 2**31
        rmask = rows < N
        raw_rows = raw_ptr + rows[:, None] * stride_raw
        out_rows = out_ptr + rows[:, None] * stride_out
        inv_temp = (1.0 / tl.load(temp_ptr + rows, mask=rmask, other=1.0).to(tl.float32))[:, None]
        n_chunks = tl.cdiv(V, K)
        offs = tl.arange(0, K)
        cidx = tl.arange(0, NC)[None, :]
        neg_inf = float("-inf")

        # ---- pass 1: one read of each row; per chunk (max, sum exp, sum exp * shift); running argmax
        cmax = tl.full((R, NC), neg_inf, tl.float32)
        csum = tl.zeros((R, NC), tl.float32)
        cwsum = tl.zeros((R, NC), tl.float32)
        best_val = tl.full((R,), neg_inf, tl.float32)
        best_idx = tl.zeros((R,), tl.int32)
        for c in range(0, n_chunks):
            idx = c * K + offs
            mask = rmask[:, None] & (idx < V)[None, :]
            x = _process(raw_rows + idx[None, :], mask, inv_temp, softcap, HAS_SOFTCAP)
            if WRITE_OUT:
                tl.store(out_rows + idx[None, :], x.to(out_ptr.dtype.element_ty), mask=mask)
            m_c = tl.max(x, axis=1)
            a_c = tl.argmax(x, axis=1, tie_break_left=True)
            better = m_c > best_val  # strict: an earlier chunk keeps a tie
            best_idx = tl.where(better, c * K + a_c, best_idx)
            best_val = tl.where(better, m_c, best_val)
            ref = tl.where(m_c == neg_inf, 0.0, m_c)[:, None]  # a fully masked chunk: every term is 0
            shifted = x - ref
            e = tl.exp(shifted)
            s_c = tl.sum(e, axis=1)
            w_c = tl.sum(e * tl.where(e > 0, shifted, 0.0), axis=1)  # no 0 * -inf
            here = cidx == c
            cmax = tl.where(here, m_c[:, None], cmax)
            csum = tl.where(here, s_c[:, None], csum)
            cwsum = tl.where(here, w_c[:, None], cwsum)

        # ---- stage 2: the chunk vectors only
        m = tl.max(cmax, axis=1)[:, None]
        m = tl.where(m == neg_inf, 0.0, m)  # rows with no finite logit (and padding rows): no NaN
        scale = tl.where(csum > 0, tl.exp(cmax - m), 0.0)  # exp(m_c - M) <= 1; 0 for masked chunks
        scale64 = scale.to(tl.float64)
        csum64 = csum.to(tl.float64)
        weight = scale64 * csum64
        live = weight > 0  # the max's chunk always is (scale 1, sum >= 1)
        cum = tl.cumsum(weight, axis=1)
        z = tl.sum(weight, axis=1)
        wterm = scale64 * (cwsum.to(tl.float64) + tl.where(live, cmax - m, 0.0).to(tl.float64) * csum64)
        w = tl.sum(tl.where(live, wterm, 0.0), axis=1)
        has_mass = z > 0
        zs = tl.where(has_mass, z, 1.0)
        entropy = tl.where(has_mass, tl.log(zs) - w / zs, float("nan"))
        tl.store(entropy_ptr + rows, entropy.to(tl.float32), mask=rmask)
        tl.store(conf_ptr + rows, tl.where(has_mass, 1.0 / zs, 0.0).to(tl.float32), mask=rmask)
        tl.store(argmax_ptr + rows, best_idx.to(tl.int64), mask=rmask)

        # ---- draw: chunk from the chunk CDF, then the token inside it (second read of K logits)
        target = tl.load(u_ptr + rows, mask=rmask, other=0.0).to(tl.float64) * z
        below = tl.sum(((cum <= target[:, None]) & (cidx < n_chunks)).to(tl.int32), axis=1)
        last_live = tl.max(tl.where(live, cidx, -1), axis=1)
        chunk = tl.maximum(tl.minimum(below, last_live), 0)
        before = tl.sum(tl.where(cidx == chunk[:, None] - 1, cum, 0.0), axis=1)
        here = cidx == chunk[:, None]
        m_chunk = tl.max(tl.where(here, cmax, neg_inf), axis=1)
        m_chunk = tl.where(m_chunk == neg_inf, 0.0, m_chunk)
        scale_chunk = tl.sum(tl.where(here, scale64, 0.0), axis=1)
        scale_chunk = tl.where(scale_chunk > 0, scale_chunk, 1.0)  # 0 only in rows with no finite logit
        # in-chunk terms exp(x - m_c) are those pass 1 summed; rescale the residual target to them
        inner_target = (target - before) / scale_chunk
        idx = chunk[:, None] * K + offs[None, :]
        mask = rmask[:, None] & (idx < V)
        x = _process(raw_rows + idx, mask, inv_temp, softcap, HAS_SOFTCAP)
        e = tl.exp(x - m_chunk[:, None])
        inner = tl.cumsum(e.to(tl.float64), axis=1)
        pos = tl.sum((inner <= inner_target[:, None]).to(tl.int32), axis=1)
        last_pos = tl.max(tl.where(e > 0, offs[None, :], -1), axis=1)
        pos = tl.maximum(tl.minimum(pos, last_pos), 0)
        tl.store(sampled_ptr + rows, (chunk * K + pos).to(tl.int64), mask=rmask)


def _check_inputs(
    raw: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor, processed_out: torch.Tensor | None
) -> None:
    """`fused_draw`'s arguments as its docstring states them, else a named error before any launch."""
    if triton is None:  # a declared dependency (requirements.txt)
        raise RuntimeError("samplers.triton_draw needs triton (pip install -r requirements.txt)")
    if raw.device.type == "cpu" and not _KERNEL_INTERPRETED:
        raise RuntimeError(
            "fused_draw on CPU tensors needs TRITON_INTERPRET=1 set before samplers.triton_draw "
            "(and triton) is first imported"
        )
    if raw.dim() != 2 or raw.stride(1) != 1:
        raise ValueError(
            f"raw must be (N, V) with contiguous rows, got shape {tuple(raw.shape)} strides {raw.stride()}"
        )
    if raw.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"raw must be float32, bfloat16 or float16, got {raw.dtype}")
    n, v = raw.shape
    if v == 0:
        raise ValueError("raw needs at least one token per row")
    if tuple(temperature.shape) != (n,) or tuple(u.shape) != (n,):
        raise ValueError(f"temperature and u must be ({n},), got {tuple(temperature.shape)} and {tuple(u.shape)}")
    if processed_out is not None:
        if processed_out.shape != raw.shape or processed_out.stride(1) != 1 or not processed_out.is_floating_point():
            raise ValueError("processed_out must be a float (N, V) tensor with contiguous rows")
        if processed_out.device != raw.device:
            raise ValueError("processed_out must be on raw's device")


def fused_draw(
    raw: torch.Tensor,
    temperature: torch.Tensor,
    u: torch.Tensor,
    softcap: float | None = None,
    processed_out: torch.Tensor | None = None,
    *,
    chunk: int | None = None,
    rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample, argmax, entropy (nats) and confidence (max probability) of softmax(x), one row each.

    raw: (N, V) float32/bfloat16/float16 raw LM-head logits (rows may be strided, tokens contiguous);
    x = softcap * tanh(raw / softcap) (skipped when softcap is None; -inf stays -inf), then
    x / temperature[row]. temperature: (N,) > 0. u: (N,) float64/float32 uniforms in [0, 1);
    `sampled` is the inverse-CDF token of u. processed_out: optional (N, V) float tensor of any float
    dtype, written with x. chunk: tile and first-level chunk size (power of two, default
    `chunk_size(V)`); rows: rows per program (power of two, default `rows_per_program`).
    Returns sampled (N,) int64, argmax (N,) int64, entropy (N,) float32, confidence (N,) float32.
    """
    _check_inputs(raw, temperature, u, processed_out)
    n, v = raw.shape
    k = chunk_size(v) if chunk is None else int(chunk)
    if k < 1 or k & (k - 1):
        raise ValueError(f"chunk must be a power of two, got {k}")
    n_chunks = -(-v // k)
    nc = max(2, _next_pow2(n_chunks))
    r = rows_per_program(n, k, n_chunks, _KERNEL_INTERPRETED) if rows is None else int(rows)
    if r < 1 or r & (r - 1):
        raise ValueError(f"rows must be a power of two, got {r}")

    dev = raw.device
    temperature = temperature.to(device=dev, dtype=torch.float32).contiguous()
    u = u.to(device=dev).contiguous()
    if u.dtype not in (torch.float32, torch.float64):
        u = u.double()
    sampled = torch.empty(n, dtype=torch.int64, device=dev)
    argmax = torch.empty(n, dtype=torch.int64, device=dev)
    entropy = torch.empty(n, dtype=torch.float32, device=dev)
    confidence = torch.empty(n, dtype=torch.float32, device=dev)
    if n == 0:
        return sampled, argmax, entropy, confidence
    write = processed_out is not None
    out = processed_out if write else raw  # not touched unless WRITE_OUT
    width = r * max(k, nc)
    _fused_draw_kernel[(-(-n // r),)](
        raw,
        temperature,
        u,
        out,
        sampled,
        argmax,
        entropy,
        confidence,
        n,
        v,
        raw.stride(0),
        out.stride(0),
        float(softcap) if softcap is not None else 1.0,
        K=k,
        NC=nc,
        R=r,
        HAS_SOFTCAP=softcap is not None,
        WRITE_OUT=write,
        num_warps=4 if width <= 2048 else 8,
    )
    return sampled, argmax, entropy, confidence
