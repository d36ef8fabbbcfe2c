"""A fused MoE experts forward in Triton, registered with transformers as `experts_implementation="triton"`.

Why: transformers' `grouped_mm` path (its default) runs a layer's routed experts as separate kernels, and every
tensor between them goes through memory. With S = tokens x top_k token-expert pairs, H the hidden width and I
the expert width, per layer it writes and reads back the S x H gathered input rows, the S x 2I gate/up output,
the S x I activation, the S x H down output and its S x H weighted, un-permuted copy. At DiffusionGemma's shapes
and one 256-token canvas (S = 2,048) that is about 63 MB per layer, 1.9 GB per step: on an H100 at batch 1 the
step's largest cost above the roofline floor after the expert weights themselves (`make gpu-plan`).

Here two launches of one kernel (`_grouped_kernel`) do the same arithmetic:
- `gate_up`: a program takes a block of up to BM pairs routed to one expert and BN columns of its gate and up
  projections; it reads the pairs' token rows in place (by index: no gathered copy), accumulates gate and up in
  float32 and writes GELU(gate) * up (S x I, in the pairs' expert-sorted order);
- `down`: the same blocks times the expert's down projection, scaled by each pair's routing weight in float32,
  written to the pair's own row in (token, k) order (S x H).
The top-k sum stays torch's `view(T, k, H).sum(1)` (float32 accumulation, no atomics), so a forward is
deterministic run to run. Per layer that leaves about 30 MB
(the S x I activation written and read, the S x H pair outputs written and read, the T x H input and output).

The block table (which expert and which sorted rows each program takes) is built with torch ops of static shape
(at most ceil(S / BM) + E blocks; programs past the real count return at once), so the forward has no host sync and
captures into a CUDA graph and into `torch.compile(fullgraph=True)`, where the two kernels are opaque custom ops
(`torch.ops.dgemma.moe_gate_up` / `moe_down`, which `bench.gpu.op_trace` records as one kernel each).

It runs on CUDA; on the CPU only under Triton's interpreter (`TRITON_INTERPRET=1`, set before this module is
imported: tests), where `tl.dot` of bfloat16 tiles gives wrong results in triton 3.9 and a float32 -> bfloat16 cast
truncates, so there the kernels multiply float32 copies of the tiles and round their bfloat16 outputs to nearest
even themselves, as a GPU's cast does. Block sizes are untuned defaults: `make gpu-check` measures this against
`grouped_mm`.
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
from transformers.integrations.moe import ExpertsInterface

try:  # guarded: every model load imports this module, so a missing or broken triton only disables the option
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - ImportError, or a triton that cannot initialise on this machine
    triton = None
    tl = None

NAME = "triton"
GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
# triton reads TRITON_INTERPRET when a @triton.jit function is defined, i.e. when this module is imported
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def available(device: torch.device | str | None = None) -> bool:
    """Whether the kernels can run on `device` (any device when None): CUDA, or any device under the interpreter."""
    if triton is None:
        return False
    if _INTERPRETED:
        return True
    return torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"


CHOICES = ("eager", "grouped_mm", "batched_mm", NAME)  # `model.experts`; None: transformers' default (grouped_mm)


def loading_kwargs(experts: str | None, device: torch.device | str | None) -> dict:
    """`from_pretrained` kwargs for `model.experts`, checked before any weight loads."""
    if experts is None:
        return {}
    if experts not in CHOICES:
        raise ValueError(f"model.experts must be one of {CHOICES} or null (transformers' default), got {experts!r}")
    if experts == NAME and not available(device or "cpu"):
        raise ValueError(
            f"model.experts={NAME} needs Triton and a CUDA device (or TRITON_INTERPRET=1 for tests), got {device!r}"
        )
    return {"experts_implementation": experts}


def block_rows(pairs: int, experts: int) -> int:
    """Pairs per program: 16 (the smallest tensor-core tile) while an expert averages up to 24 pairs (one canvas
    at batch 1: 16), then 32 and 64, so large batches read each expert's weight tiles fewer times."""
    mean = pairs / max(1, experts)
    return 16 if mean <= 24 else 32 if mean <= 48 else 64


def route(expert_ids: torch.Tensor, experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs sorted by expert (`order`: original pair index of each sorted row, ties in pair order) and the
    block table (3, ceil(S / bm) + experts) int32: per block its expert (-1: no block), first sorted row and the
    expert's end row. Static shapes, no host sync."""
    s = expert_ids.numel()
    ids = expert_ids.reshape(-1)
    _, order = torch.sort(ids, stable=True)
    counts = torch.zeros(experts, dtype=torch.int64, device=ids.device).scatter_add_(0, ids, torch.ones_like(ids))
    ends = torch.cumsum(counts, 0)
    blocks = (counts + bm - 1) // bm
    block_end = torch.cumsum(blocks, 0)
    n = math.ceil(s / bm) + experts
    i = torch.arange(n, device=ids.device)
    e = torch.searchsorted(block_end, i, right=True)
    ec = e.clamp(max=experts - 1)
    first = ends[ec] - counts[ec] + (i - (block_end[ec] - blocks[ec])) * bm
    table = torch.stack([torch.where(e < experts, e, -1), first, ends[ec]]).to(torch.int32)
    return order, table


if triton is not None:

    @triton.jit
    def _to_out(v, out_ptr, RNE_BF16: tl.constexpr):
        # the interpreter truncates float32 -> bfloat16 (a GPU rounds to nearest even): round the bits first there
        if RNE_BF16:
            bits = v.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            v = bits.to(tl.float32, bitcast=True)
        return v.to(out_ptr.dtype.element_ty)

    @triton.jit
    def _program(table_ptr, n_blocks, width, BM: tl.constexpr, BN: tl.constexpr):
        # this program's expert, rows (up to BM consecutive expert-sorted pairs) and BN output columns. A 1-D grid
        # with a block's column tiles next to each other: the block's rows and its expert's weight tiles come from
        # memory once, and from L2 for the block's other tiles and the expert's next block
        pid = tl.program_id(0)
        tiles = tl.cdiv(width, BN)
        blk = pid // tiles
        cols = (pid % tiles) * BN + tl.arange(0, BN)
        rows = tl.load(table_ptr + n_blocks + blk).to(tl.int64) + tl.arange(0, BM)  # int64: S x H may pass 2^31
        end = tl.load(table_ptr + 2 * n_blocks + blk)
        return tl.load(table_ptr + blk), rows, rows < end, cols, cols < width

    @triton.jit
    def _grouped_kernel(
        a_ptr,
        w_ptr,
        rw_ptr,
        out_ptr,
        order_ptr,
        table_ptr,
        n_blocks,
        top_k,
        width,
        depth,
        sa0,
        sa1,
        sw0,
        sw1,
        sw2,
        so0,
        so1,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GATE_UP: tl.constexpr,
        F32_DOT: tl.constexpr,
        RNE_BF16: tl.constexpr,
    ):
        # a block of expert-sorted pairs times BN output columns of its expert's (E, N, depth) weight. GATE_UP: the
        # rows of `a` are the pairs' tokens (order // top_k), the weight holds [gate; up] (N = 2 width), and
        # GELU(gate) * up goes to the sorted row; else `a` holds the sorted rows, and the output, scaled by the
        # pair's routing weight, goes to the pair's own row (order)
        e, rows, rmask, cols, cmask = _program(table_ptr, n_blocks, width, BM, BN)
        if e < 0:
            return
        pair = tl.load(order_ptr + rows, mask=rmask, other=0)
        if GATE_UP:
            a_rows, out_rows = pair // top_k, rows
        else:
            a_rows, out_rows = rows, pair
        w_base = w_ptr + e.to(tl.int64) * sw0
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc_up = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, depth, BK):
            ks = k0 + tl.arange(0, BK)
            kmask = ks < depth
            a = tl.load(
                a_ptr + a_rows[:, None] * sa0 + ks[None, :] * sa1, mask=rmask[:, None] & kmask[None, :], other=0.0
            )
            wmask = kmask[:, None] & cmask[None, :]
            w = tl.load(w_base + cols[None, :] * sw1 + ks[:, None] * sw2, mask=wmask, other=0.0)
            if F32_DOT:
                a, w = a.to(tl.float32), w.to(tl.float32)
            acc = tl.dot(a, w, acc)
            if GATE_UP:
                wu = tl.load(w_base + (cols[None, :] + width) * sw1 + ks[:, None] * sw2, mask=wmask, other=0.0)
                if F32_DOT:
                    wu = wu.to(tl.float32)
                acc_up = tl.dot(a, wu, acc_up)
        if GATE_UP:
            # GELU, tanh form: 0.5 g (1 + tanh(z)) = g * sigmoid(2 z), z = sqrt(2 / pi) (g + 0.044715 g^3)
            acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)) * acc_up
        else:
            acc = acc * tl.load(rw_ptr + pair, mask=rmask, other=0.0).to(tl.float32)[:, None]
        tl.store(
            out_ptr + out_rows[:, None] * so0 + cols[None, :] * so1,
            _to_out(acc, out_ptr, RNE_BF16),
            mask=rmask[:, None] & cmask[None, :],
        )


def _interpreter_flags(out: torch.Tensor) -> dict:
    return {"F32_DOT": _INTERPRETED, "RNE_BF16": _INTERPRETED and out.dtype == torch.bfloat16}


def _tiles(n: int) -> int:
    return 64 if n >= 64 else max(16, triton.next_power_of_2(n))


def _on(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' (a model spread over GPUs by `device_map`)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _check(x: torch.Tensor) -> None:
    if not available(x.device):
        raise RuntimeError(
            f"experts_implementation={NAME!r} needs Triton and a CUDA device (or TRITON_INTERPRET=1, set before "
            f"models.kernels.fused_moe is imported, for tests); got a {x.device.type} tensor"
        )


def _launch(a, w, weights, out, order, table, top_k: int, bm: int, gate_up: bool) -> torch.Tensor:
    _check(a)
    width, depth, n_blocks = out.shape[1], w.shape[2], table.shape[1]
    bn, bk = _tiles(width), _tiles(depth)
    with _on(a.device):
        _grouped_kernel[(n_blocks * triton.cdiv(width, bn),)](
            a, w, weights, out, order, table, n_blocks, top_k, width, depth,
            *a.stride(), *w.stride(), *out.stride(), BM=bm, BN=bn, BK=bk, GATE_UP=gate_up, **_interpreter_flags(out),
        )  # fmt: skip
    return out


@torch.library.custom_op("dgemma::moe_gate_up", mutates_args=())
def moe_gate_up(
    x: torch.Tensor, w: torch.Tensor, order: torch.Tensor, table: torch.Tensor, top_k: int, bm: int
) -> torch.Tensor:
    """GELU(x W_gate^T) * (x W_up^T) per pair, rows in expert-sorted order: x (T, H), w (E, 2I, H) -> (S, I).
    `order`, `table`: `route(..., bm)`'s."""
    out = x.new_empty(order.numel(), w.shape[1] // 2)
    return _launch(x, w, None, out, order, table, top_k, bm, gate_up=True)


@moe_gate_up.register_fake
def _(x, w, order, table, top_k, bm):
    return x.new_empty(order.numel(), w.shape[1] // 2)


@torch.library.custom_op("dgemma::moe_down", mutates_args=())
def moe_down(
    h: torch.Tensor, w: torch.Tensor, weights: torch.Tensor, order: torch.Tensor, table: torch.Tensor, bm: int
) -> torch.Tensor:
    """(h W_down^T) * routing weight per pair, written at the pair's own row: h (S, I) sorted, w (E, H, I),
    weights (S,) in pair order -> (S, H) in pair order."""
    return _launch(h, w, weights, h.new_empty(order.numel(), w.shape[1]), order, table, 1, bm, gate_up=False)


@moe_down.register_fake
def _(h, w, weights, order, table, bm):
    return h.new_empty(order.numel(), w.shape[1])


def triton_experts_forward(
    self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """transformers' experts forward signature (`ExpertsInterface`): (T, H) states, (T, k) experts and weights."""
    if not getattr(self, "has_gate", True) or self.has_bias or self.is_transposed or self.has_post_expert_norm:
        raise ValueError(f"experts_implementation={NAME!r} covers gated experts without bias or post-expert norm")
    if self._is_expert_parallel or not getattr(self, "is_concatenated", True):
        raise ValueError(f"experts_implementation={NAME!r} covers concatenated [gate; up] weights, no expert parallel")
    act = getattr(self.config, "hidden_activation", None) or getattr(self.config, "hidden_act", None)
    if act not in GELU_TANH:
        raise ValueError(f"experts_implementation={NAME!r} implements GELU (tanh form), not {act!r}")
    tokens, top_k = top_k_index.shape
    bm = block_rows(tokens * top_k, self.num_experts)
    order, table = route(top_k_index, self.num_experts, bm)
    x = hidden_states.to(self.gate_up_proj.dtype)
    h = torch.ops.dgemma.moe_gate_up(x, self.gate_up_proj, order, table, top_k, bm)
    pairs = torch.ops.dgemma.moe_down(h, self.down_proj, top_k_weights.reshape(-1), order, table, bm)
    return pairs.view(tokens, top_k, self.down_proj.shape[1]).sum(dim=1).to(hidden_states.dtype)


ExpertsInterface.register(NAME, triton_experts_forward)
