"""GPU cost-model arithmetic for `bench.gpu_plan`: GPU specs, per-op scaling, per-part roofline times.

No torch here: this module turns a *profile* (the aten ops of one real forward of a narrow twin of the
config, recorded by `bench.gpu_plan.build_profile`) into predicted per-step costs at the real widths.

Per op, each tensor shape of the twin is rescaled to the real model: a dimension equal to a twin width
(hidden, dense FFN, expert FFN and its doubled gate/up width) becomes the real width; inside attention
and cache ops a dimension equal to the twin's cached context (or context + canvas, + 1 token, + 2
canvases) becomes the target context (sliding layers: min(context, window - 1)). FLOPs come from the
rescaled shapes (matmuls, grouped matmuls, SDPA; 1 per output element otherwise), bytes from the
rescaled inputs and outputs of every kernel (views move nothing). Quantities are then fitted linearly in
the batch from two traces (B=1 and B=3 for the adapter: exact for code whose per-step work is a fixed
part plus a per-row part). Expert weights are the exception: each grouped matmul reads the experts its
tokens touch, 128 * (1 - (1 - 8/128)^tokens) of 128 (uniform routing) or a calibrated count.

Time per part = max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth); a step is the sum over
parts plus the host time its GPU work does not hide (eager launches overlap it; a CUDA graph's launch does not).
These are arithmetic predictions, not measurements.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

# ---------------------------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    peak_flops: float  # dense bf16 FLOP/s (no 2:4 sparsity)
    hbm_bw: float  # bytes/s
    flops_frac: float = 0.6  # share of the peak a well-tuned kernel reaches
    bw_frac: float = 0.8
    eager_launch_us: float = 5.0  # host cost of one eager PyTorch op that launches a kernel
    view_us: float = 1.0  # host cost of a view / metadata op (no kernel)
    graph_launch_us: float = 10.0  # one CUDA-graph replay per step
    graph_node_us: float = 0.0  # device-side gap per kernel inside a graph (0 = ideal; ~1 us is typical)

    @property
    def flops(self) -> float:
        return self.peak_flops * self.flops_frac

    @property
    def bw(self) -> float:
        return self.hbm_bw * self.bw_frac

    def ms(self, flops: float, nbytes: float) -> float:
        return 1e3 * max(flops / self.flops, nbytes / self.bw)

    def describe(self) -> dict[str, Any]:
        return asdict(self)


GPUS = {
    "h100": GPU("h100", "H100 SXM", 989.4e12, 3.35e12),
    "h200": GPU("h200", "H200", 989.4e12, 4.8e12),
    "a100": GPU("a100", "A100 80GB", 312e12, 2.039e12),
}

# The technical report's batch-1 figures (H100, FP8) and tokens per forward: ours are bf16, so compare ratios.
REPORT = {
    "diffusion": {"tpf": 19.7, "tok_s": 1479.0},
    "ar": {"tpf": 1.0, "tok_s": 204.0},
    "ar_mtp": {"tpf": 1.4, "tok_s": 303.0},
}

PARTS = ("attention", "moe", "mlp", "lm_head", "selfcond", "sampler", "cache", "encode", "other")
FIELDS = ("flops", "weights", "kv", "kvcopy", "logits", "act", "kernels", "views", "ops", "act_mm", "logits_mm")
BYTES = ("weights", "kv", "kvcopy", "logits", "act")
DIFFUSION = ("current", "compiled", "per_row", "planned", "fused", "generate", "floor")
AR = ("ar_same", "ar_gemma4", "ar_mtp", "ar_floor")
VARIANTS = DIFFUSION + AR


# the pre-`models.logits_blocks` denoise: per batch row, per block of this many float32 logits bytes, one LM-head
# matmul (1 kernel, 4 views) and one self-conditioning block (slice, cast, softmax, cast, matmul, scale, copy:
# 6 kernels, 5 views), as traced from that code
PER_ROW_BLOCK_BYTES = 64 << 20
# indexed reads: their source costs at most what they pick (`op_cost`)
GATHER = re.compile(r"aten\.(gather|index|index_select|take|embedding)\b")
PER_ROW_OPS = {"lm_head": (1, 4), "selfcond": (6, 5)}


def gpu_spec(gpu: str | GPU, **overrides) -> GPU:
    g = gpu if isinstance(gpu, GPU) else GPUS[gpu.lower().replace(" ", "").replace("sxm", "").replace("80gb", "")]
    if overrides:
        g = GPU(**{**asdict(g), **{k: v for k, v in overrides.items() if v is not None}})
    return g


def touched_fraction(tokens: float, experts: int, top_k: int, per_canvas: float | None = None, canvas: int = 256):
    """Expected share of experts hit by `tokens` routings of top-k of E (uniform): 1 - (1 - k/E)^tokens.
    `per_canvas` calibrates the exponent so one canvas touches that many (the report's ~84 of 128)."""
    if tokens <= 0:
        return 0.0
    miss = 1.0 - top_k / experts
    alpha = 1.0
    if per_canvas is not None:
        alpha = math.log(1.0 - per_canvas / experts) / (canvas * math.log(miss))
    return max(min(1.0, tokens * top_k / experts) if tokens < 1 else top_k / experts, 1.0 - miss ** (tokens * alpha))


# ---------------------------------------------------------------------------------------------- op scaling


@dataclass(frozen=True)
class Shapes:
    """The twin's widths (what a traced dimension may equal) and the real config they stand for."""

    twin: dict[str, int]
    real: dict[str, Any]

    def width_map(self) -> dict[int, int]:
        t, r = self.twin, self.real
        return {
            t["hidden"]: r["hidden_size"],
            t["intermediate"]: r["intermediate_size"],
            t["moe"]: r["moe_intermediate_size"],
            2 * t["moe"]: 2 * r["moe_intermediate_size"],
        }

    def held(self, context: int, sliding: bool) -> int:
        return min(context, self.real["sliding_window"] - 1) if sliding else context

    def context_map(self, lt: str | None, context: int) -> dict[int, int]:
        """Twin cached-slot counts -> real ones, for one layer type (None: both, for ops outside layers)."""
        c = self.twin["canvas"]
        out: dict[int, int] = {}
        for kind in ("full", "sliding") if lt is None else (lt,):
            held_t = self.twin["held_sliding"] if kind == "sliding" else self.twin["context"]
            held_r = self.held(context, kind == "sliding")
            for extra in (0, 1, c, 2 * c):
                out[held_t + extra] = held_r + extra
            if kind == "sliding":  # a slot cache's ring (window - 1 + canvas) holds the twin's whole context: a
                ring = self.real["sliding_window"] - 1 + self.real["canvas_length"]  # forward attends its slots
                for extra in (0, 1):
                    out.setdefault(self.twin["context"] + extra, min(context + extra, ring))
        return out

    def ctx_dims(self) -> set[int]:
        return set(self.context_map(None, 0))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def op_cost(rec: dict, shapes: Shapes, context: int, wmap: dict[int, int], cmaps: dict) -> dict[str, Any]:
    """FLOPs and bytes (by category) of one recorded op at the real widths and `context`."""
    part, kind = rec["part"], rec["kind"]
    scale_ctx = part in ("attention", "cache") or rec["kvcopy"]
    m = dict(wmap)
    if scale_ctx:
        m.update(cmaps[rec["lt"]])

    def sub(shape):
        return [m.get(d, d) for d in shape]

    ins = [(sub(s), b, role, p) for s, b, role, p in rec["ins"]]
    outs = [(sub(s), b) for s, b in rec["outs"]]
    cost = {f: 0.0 for f in FIELDS}
    cost["ops"] = 1
    experts: list[tuple[float, float]] = []
    params: dict[str, float] = {}
    embed_rows = 0
    if kind == "view":
        cost["views"] = 1
        return {"cost": cost, "experts": experts, "params": params, "embed_rows": 0}
    cost["kernels"] = rec.get("launch", 1)
    mem_in, mem_out = rec.get("mem_in", [1] * len(ins)), rec.get("mem_out", [1] * len(outs))
    mats = [s for s, _, _, _ in ins if len(s) >= 2]
    if kind == "mm" and len(mats) >= 2:
        a, b = mats[-2], mats[-1]
        cost["flops"] = 2.0 * _numel(a) * b[-1]
    elif kind == "gmm" and len(mats) >= 2:
        cost["flops"] = 2.0 * _numel(mats[0]) * mats[1][-1]
    elif kind == "sdpa" and len(mats) >= 3:
        q, k, v = mats[0], mats[1], mats[2]
        cost["flops"] = 2.0 * _numel(q) * k[-2] + 2.0 * (_numel(q) // q[-1]) * k[-2] * v[-1]
    else:
        cost["flops"] = float(max((_numel(s) for s, _ in outs), default=0))
    out_bytes = sum(_numel(s) * b for s, b in outs)
    vocab = shapes.real["vocab_size"]
    cat = "kvcopy" if rec["kvcopy"] else None
    gather = GATHER.match(rec["op"]) is not None
    for i, (s, b, role, p) in enumerate(ins):
        n = float(_numel(s) * b) * mem_in[i]  # 0: read inside a fused kernel (`bench.fusion`)
        if gather and i == 0:  # an indexed read loads what it picks (a chunk of each logits row), not its source
            n = min(n, out_bytes)
        if role == "x" and kind == "gmm":  # expert weights: what the tokens touch, added by the caller
            experts.append((n, rec["tokens_per_row"]))
        elif role in ("w", "e"):
            if kind in ("mm", "gmm"):
                cost["weights"] += n
                params[p] = n
            else:  # a gather (embedding lookup, per-expert scale): what the output holds
                cost["weights"] += min(n, out_bytes)
        elif cat:
            cost[cat] += n
        elif kind == "sdpa" and i in (1, 2):
            cost["kv"] += n
        elif s and s[-1] == vocab:
            cost["logits"] += n
        else:
            cost["act"] += n
    for (s, b), m in zip(outs, mem_out, strict=True):
        n = float(_numel(s) * b) * m
        cost[cat or ("logits" if s and s[-1] == vocab else "act")] += n
    if kind in ("mm", "gmm", "sdpa"):  # what stays when every elementwise op is fused into these kernels
        cost["act_mm"], cost["logits_mm"] = cost["act"], cost["logits"]
    if kind == "mm" and any(role == "e" for _, _, role, _ in ins):
        embed_rows = max(1, _numel(outs[0][0]) // outs[0][0][-1]) if outs else 0
    return {"cost": cost, "experts": experts, "params": params, "embed_rows": embed_rows}


def aggregate(records: list[dict], shapes: Shapes, context: int, vocab: int | None = None) -> dict[str, Any]:
    """Sum a trace's ops per part at `context`: fields, expert reads, distinct weights, embedding matmuls.
    `vocab`: the traced model's vocabulary when it is smaller than the real one (then rescaled too)."""
    wmap = shapes.width_map()
    if vocab and vocab != shapes.real["vocab_size"]:
        wmap[vocab] = shapes.real["vocab_size"]
    cmaps = {lt: shapes.context_map(lt, context) for lt in (None, "full", "sliding")}
    parts: dict[str, dict[str, float]] = {}
    experts: list[tuple[float, float]] = []
    params: dict[str, dict[str, float]] = {}
    embed: dict[str, list[int]] = {}
    for rec in records:
        c = op_cost(rec, shapes, context, wmap, cmaps)
        n = rec["count"]
        acc = parts.setdefault(rec["part"], {f: 0.0 for f in FIELDS})
        for f, v in c["cost"].items():
            acc[f] += n * v
        experts += c["experts"] * n
        params.setdefault(rec["part"], {}).update(c["params"])
        if c["embed_rows"]:
            embed.setdefault(rec["part"], []).extend([c["embed_rows"]] * n)
    return {"parts": parts, "experts": experts, "params": params, "embed": embed}


# ---------------------------------------------------------------------------------------------- fits


def _lin(a: float, b: float, x1: float, x2: float, x: float) -> float:
    return a + (b - a) * (x - x1) / (x2 - x1)


def fit_parts(p1: dict, p2: dict, x1: float, x2: float, x: float) -> dict[str, dict[str, float]]:
    """Per part and field, the value at batch x on the line through (x1, p1) and (x2, p2)."""
    out = {}
    for part in set(p1) | set(p2):
        a, b = p1.get(part, {}), p2.get(part, {})
        out[part] = {f: max(0.0, _lin(a.get(f, 0.0), b.get(f, 0.0), x1, x2, x)) for f in FIELDS}
    return out


def bilinear_parts(p31: dict, p32: dict, p21: dict, b: float, k: float, b0: int = 3) -> dict[str, dict[str, float]]:
    """v(B, k) = v(b0,1) + (B-b0) [v(b0,1) - v(b0-1,1)] + (k-1) [v(b0,2) - v(b0,1)] (batch rows, committing rows;
    the arguments are v(b0,1), v(b0,2) and v(b0-1,1))."""
    out = {}
    for part in set(p31) | set(p32) | set(p21):
        a, c, d = p31.get(part, {}), p32.get(part, {}), p21.get(part, {})
        out[part] = {
            f: max(
                0.0,
                a.get(f, 0.0) + (b - b0) * (a.get(f, 0.0) - d.get(f, 0.0)) + (k - 1) * (c.get(f, 0.0) - a.get(f, 0.0)),
            )
            for f in FIELDS
        }
    return out


def embed_reads(agg1: dict, agg3: dict, part: str, rows_per_item: int, b: float, b3: int = 3) -> dict[str, Any]:
    """How many embedding-weight matmuls a step makes in `part` at batch b, read from the two traces.

    Per-row code (the count at B=3 is 3x the count at B=1): b x count(B=1). The same count at B=1 and B=3
    (all rows together, blocks sized in proportion to the batch): that count at any batch. Otherwise (all
    rows together in fixed-size blocks): ceil(b x rows / block), block = the most rows one matmul covered."""
    r1, r3 = agg1["embed"].get(part, []), agg3["embed"].get(part, [])
    if not r1:
        return {"reads": 0, "mode": "none", "rows_per_matmul": 0}
    if len(r3) == b3 * len(r1) and len(r1) * max(r1) <= rows_per_item:
        return {"reads": b * len(r1), "mode": "per row", "rows_per_matmul": max(r1)}
    if len(r3) == len(r1):
        return {"reads": len(r1), "mode": "all rows, per batch", "rows_per_matmul": max(r3)}
    block = max(r3)
    return {"reads": math.ceil(b * rows_per_item / block), "mode": "all rows, fixed blocks", "rows_per_matmul": block}


# ---------------------------------------------------------------------------------------------- variants


@dataclass
class Knobs:
    tpf: float = REPORT["diffusion"]["tpf"]
    ar_tpf: float = REPORT["ar"]["tpf"]
    mtp_tpf: float = REPORT["ar_mtp"]["tpf"]
    mtp_draft: int = 1  # draft tokens verified per AR+MTP step (the drafter's own forward is not modelled)
    experts_per_canvas: float | None = None  # None: uniform routing; 84: the report's count for one canvas
    spread: float = 0.0  # rows' contexts uniform in [ctx (1 - spread), ctx], the longest at ctx: planned/floor
    # attend each row's own (mean ctx (1 - spread (B - 1) / 2B)); current/generate pad every row to the longest
    # slots the cache holds per row (a run reserves prompt + max_new_tokens at admission); None: just the context.
    # neither engine attends them: both attend up to the longest row (`compiled`: rounded up to its span quantum)
    capacity: int | None = None


class Model:
    """Predictions from one profile (see `bench.gpu_plan.build_profile`)."""

    def __init__(self, profile: dict, knobs: Knobs | None = None):
        self.profile, self.knobs = profile, knobs or Knobs()
        self.shapes = Shapes(profile["twin"], profile["real"])
        self.real = profile["real"]
        self._agg: dict = {}

    # -- helpers
    def agg(self, trace: str, key: str, context: int) -> dict:
        k = (trace, key, context)
        if k not in self._agg:
            t = self.profile["traces"][trace][key]
            self._agg[k] = aggregate(t["records"], self.shapes, context, t.get("vocab"))
        return self._agg[k]

    def rows(self, trace: str, key: str) -> int:
        return self.profile["traces"][trace][key]["rows"]

    def fit(self, trace: str, context: int, b: float) -> dict:
        keys = list(self.profile["traces"][trace])
        k1, k2 = keys[0], keys[1]
        x1, x2 = self.rows(trace, k1), self.rows(trace, k2)
        return fit_parts(self.agg(trace, k1, context)["parts"], self.agg(trace, k2, context)["parts"], x1, x2, b)

    def touched(self, tokens: float) -> float:
        r = self.real
        return touched_fraction(
            tokens, r["num_experts"], r["top_k_experts"], self.knobs.experts_per_canvas, r["canvas_length"]
        )

    def expert_bytes(self, trace: str, key: str, context: int, tokens_scale: float, extra_tokens: float = 0.0):
        """Expert weight bytes read by the grouped matmuls of one trace when each row brings tokens_per_row x
        tokens_scale tokens (+ extra_tokens, e.g. committed canvases in the same forward)."""
        return sum(
            n * self.touched(t * tokens_scale + extra_tokens) for n, t in self.agg(trace, key, context)["experts"]
        )

    def distinct_weights(self, trace: str, key: str, context: int) -> dict[str, float]:
        return {part: sum(ps.values()) for part, ps in self.agg(trace, key, context)["params"].items()}

    def kv_gqa_bytes(self, rows: float, context: int) -> float:
        """K/V bytes of the cache plus the canvas, each read once at its real heads (no repeat_kv copies)."""
        r, c = self.real, self.real["canvas_length"]
        total = 0.0
        for lt in r["layer_types"]:
            sliding = lt == "sliding"
            heads = r["num_key_value_heads"] if sliding else r["num_global_key_value_heads"]
            hd = r["head_dim"] if sliding else r["global_head_dim"]
            total += rows * (self.shapes.held(context, sliding) + c) * heads * hd * 2 * 2  # K and V, bf16
        return total

    def kv_token_bytes(self) -> float:
        """K/V bytes one new token writes into the cache (all layers, bf16)."""
        r = self.real
        total = 0.0
        for lt in r["layer_types"]:
            sliding = lt == "sliding"
            heads = r["num_key_value_heads"] if sliding else r["num_global_key_value_heads"]
            total += heads * (r["head_dim"] if sliding else r["global_head_dim"]) * 2 * 2
        return total

    def steps_per_canvas(self) -> float:
        return self.real["canvas_length"] / self.knobs.tpf

    # -- parts -> times
    @staticmethod
    def _bytes(f: dict) -> float:
        return sum(f.get(k, 0.0) for k in BYTES)

    def finish(
        self,
        gpu: GPU,
        parts: dict,
        dispatch_s: float,
        meta: dict,
        tokens_per_step: float,
        floor=None,
        overlap: bool = False,
    ):
        """Per-part roofline times and the step. `dispatch_s`: host time to launch the step's kernels. `overlap`
        (eager code): launches are asynchronous, so the host enqueues ahead of the GPU until the step's one read
        of its result, and the step takes the longer of the two; otherwise (a graph launch) the host time adds."""
        out_parts = {}
        for name in PARTS:
            f = parts.get(name)
            if not f:
                continue
            nbytes = self._bytes(f)
            out_parts[name] = {
                "flops": f.get("flops", 0.0),
                "bytes": nbytes,
                **{k: f.get(k, 0.0) for k in BYTES},
                "kernels": f.get("kernels", 0.0),
                "ms": gpu.ms(f.get("flops", 0.0), nbytes),
            }
        if floor is None:
            gpu_ms = sum(p["ms"] for p in out_parts.values())
        else:  # the whole step as one roofline: FLOPs and bytes overlap across parts
            gpu_ms = gpu.ms(floor["flops"], floor["bytes"])
        exposed = max(0.0, dispatch_s - gpu_ms / 1e3) if overlap else dispatch_s
        total = gpu_ms + 1e3 * exposed
        return {
            "parts": out_parts,
            "gpu_ms": gpu_ms,
            "host_ms": 1e3 * dispatch_s,
            "dispatch_ms": 1e3 * exposed,
            "total_ms": total,
            "tokens_per_step": tokens_per_step,
            "tokens_per_s": tokens_per_step / (total / 1e3) if total > 0 else float("inf"),
            "flops": sum(p["flops"] for p in out_parts.values()) if floor is None else floor["flops"],
            "bytes": sum(p["bytes"] for p in out_parts.values()) if floor is None else floor["bytes"],
            **meta,
        }

    @staticmethod
    def _add(parts: dict, name: str, f: dict, scale: float = 1.0) -> None:
        acc = parts.setdefault(name, {k: 0.0 for k in FIELDS})
        for k in FIELDS:
            acc[k] += scale * f.get(k, 0.0)

    def _eager_dispatch(self, gpu: GPU, parts: dict) -> float:
        kernels = sum(p.get("kernels", 0.0) for p in parts.values())
        views = sum(p.get("views", 0.0) for p in parts.values())
        return 1e-6 * (kernels * gpu.eager_launch_us + views * gpu.view_us)

    def _graph_dispatch(self, gpu: GPU, kernels: float) -> float:
        return 1e-6 * (gpu.graph_launch_us + kernels * gpu.graph_node_us)

    def _sampler(self, b: float, context: int) -> dict:
        """The engine's sampler step on a GPU: the fused Triton kernel reads the raw bf16 logits once and writes
        the processed ones (the next self-conditioning input) once; the glue ops around it are traced."""
        r = self.real
        n = b * r["canvas_length"] * r["vocab_size"]
        glue = self.fit("sampler", context, b).get("sampler", {})
        f = {k: glue.get(k, 0.0) for k in FIELDS}
        f["logits"] += n * (2 + 2)
        f["flops"] += 10.0 * n
        f["kernels"] += 1
        f["ops"] += 1
        return f

    def _commit_current(self, b: float, context: int) -> tuple[dict, dict]:
        """The engine's commits, per step: each row commits every C / TPF steps. B = 1: the all-rows path
        (one encoder forward writing into the row's slots); B > 1: rows finish at different steps, so a commit
        event (probability 1 - (1 - 1/s)^B per step, r/e rows each) re-encodes those rows, attending their slots
        in place, then rebuilds the masks (fitted from the traced `commit_part`)."""
        s = self.steps_per_canvas()
        c = self.real["canvas_length"]
        if b <= 1:
            events, k = b / s, 1.0
            fitted = self.fit("commit_full", context, k)
            ex = self.expert_bytes("commit_full", "1", context, 1.0)
        else:
            events = 1.0 - (1.0 - 1.0 / s) ** b
            k = (b / s) / events
            t = self.profile["traces"]["commit_part"]
            p = {key: self.agg("commit_part", key, context)["parts"] for key in t}
            fitted = bilinear_parts(p["3,1"], p["3,2"], p["2,1"], b, k)
            ex = self.expert_bytes("commit_part", "3,1", context, k)
        fitted = {name: {f: v * events for f, v in fp.items()} for name, fp in fitted.items()}
        fitted.setdefault("encode", {f: 0.0 for f in FIELDS})["weights"] += events * ex
        return fitted, {"commit_events_per_step": events, "rows_per_commit": k, "commit_tokens": k * c}

    # -- the variants
    def predict(self, gpu: GPU, b: int, context: int, variant: str) -> dict[str, Any]:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        return getattr(self, f"_v_{variant}")(gpu, b, context)

    def _denoise_parts(self, b: int, context: int) -> tuple[dict, dict]:
        """The adapter's denoise at batch b, as the code runs now (fit of the B=1 and B=3 traces)."""
        parts = self.fit("denoise", context, b)
        a1, a3 = self.agg("denoise", "1", context), self.agg("denoise", "3", context)
        c = self.real["canvas_length"]
        reads = {}
        embed = self.profile["embed_bytes"]
        for part in ("lm_head", "selfcond"):
            r = embed_reads(a1, a3, part, c, b)
            reads[part] = r
            if part in parts and r["reads"]:
                f = parts[part]
                n1, n3 = len(a1["embed"].get(part, [])), len(a3["embed"].get(part, []))
                other = max(0.0, a1["parts"][part]["weights"] - n1 * embed)  # the part's other weights
                f["weights"] = other + r["reads"] * embed
                if n3 != n1:  # host ops follow the matmul count (the per-block loop), not the batch
                    for k in ("kernels", "views", "ops"):
                        v1, v3 = a1["parts"][part][k], a3["parts"][part][k]
                        f[k] = max(0.0, v1 + (v3 - v1) / (n3 - n1) * (r["reads"] - n1))
        parts.setdefault("moe", {f: 0.0 for f in FIELDS})["weights"] += self.expert_bytes("denoise", "1", context, b)
        return parts, reads

    def _v_current(self, gpu: GPU, b: int, context: int) -> dict:
        return self._current(gpu, b, context, per_row=False)

    def _step_graph_parts(self, rows: int, k: int, context: int) -> dict:
        """The traced step graph over `rows` rows with k commit entries folded in (k = 0: none), at `context`: the
        whole step fit at B = 1, 2 (`whole_step`), with a commit the bilinear fit of the joint graph at (rows,
        entries) = (1, 1), (2, 1), (2, 2) (`joint_step`); the touched experts for rows + k canvases of tokens."""
        if k == 0:
            parts = self.fit("whole_step", context, rows)
            trace, key = "whole_step", "1"
        else:
            p = {key: self.agg("joint_step", key, context)["parts"] for key in ("2,1", "2,2", "1,1")}
            parts = bilinear_parts(p["2,1"], p["2,2"], p["1,1"], rows, k, b0=2)
            trace, key = "joint_step", "1,1"
        parts.setdefault("moe", {f: 0.0 for f in FIELDS})["weights"] += self.expert_bytes(trace, key, context, rows + k)
        return parts

    def _v_compiled(self, gpu: GPU, b: int, context: int) -> dict:
        """The engine with `model.compile=step` on CUDA (`mode="reduce-overhead"`): the step's graph as traced
        (`harness.step_graph`) over its power-of-two bucket of rows, its elementwise ops fused by inductor's rules
        (`bench.fusion`), replayed as one CUDA graph; full layers attend the slots up to the longest row, rounded
        up to `SPAN_QUANTUM` (a dynamic size: what the cache reserves beyond it costs nothing). Commits fold into
        the step (`WholeStep.with_commit`): on a step where some rows stopped the step before (each with
        probability TPF / C, independently), their re-encode runs as a bucket of k more entries of the same graph.
        Expected over the binomial count of committing rows; one launch per step."""
        from harness.step_graph import SPAN_QUANTUM
        from models.slot_cache import bucket

        rows = bucket(b)
        c = self.real["canvas_length"]
        # full layers attend up to the longest row's canvas end, rounded up to the span quantum, within the cache
        # (`WholeStep.span_of`); the traces hold context + 2C slots, so the attention is fit at span - 2C
        reserved = max(context, self.knobs.capacity or 0) + 2 * c
        span = min(reserved, -(-(context + c) // SPAN_QUANTUM) * SPAN_QUANTUM)
        held = max(context, span - 2 * c)
        p = 1.0 / self.steps_per_canvas()
        weights: dict[int, float] = {}
        for k in range(b + 1):  # commit entries per step: the bucket of the committing rows' count (0: none)
            kb = bucket(k) if k else 0
            weights[kb] = weights.get(kb, 0.0) + math.comb(b, k) * p**k * (1.0 - p) ** (b - k)
        parts: dict = {}
        for kb, q in weights.items():
            f = self._step_graph_parts(rows, kb, context)
            if held != context:  # the full layers' span is past the traced context + 2C
                f["attention"] = self._step_graph_parts(rows, kb, held)["attention"]
            for name, x in f.items():
                self._add(parts, name, x, q)
        events = 1.0 - weights.get(0, 0.0)
        a1 = self.agg("whole_step", "1", context)
        meta = {
            "weight_reads": {k: len(a1["embed"].get(k, [])) for k in ("lm_head", "selfcond")},
            "bucket_rows": rows,
            "slots_attended": max(span, context + 2 * c),
            "kernels": sum(f.get("kernels", 0) for f in parts.values()),
            "commit_events_per_step": events,
            "commit_bucket_rows": sum(kb * q for kb, q in weights.items()) / events if events else 0.0,
        }
        return self.finish(gpu, parts, self._graph_dispatch(gpu, meta["kernels"]), meta, b * self.knobs.tpf, None)

    def _v_per_row(self, gpu: GPU, b: int, context: int) -> dict:
        """What-if: the engine before `models.logits_blocks`, the LM head and the self-conditioning matmul once
        per batch row and per 64 MiB block of float32 logits (64 positions at V = 262,144): 2 x B x 4 weight
        reads per step; each extra block adds the old loop's ops (traced from that code: 7 kernels, 9 views)."""
        return self._current(gpu, b, context, per_row=True)

    def _current(self, gpu: GPU, b: int, context: int, per_row: bool) -> dict:
        parts, reads = self._denoise_parts(b, context)
        if per_row:
            c, v = self.real["canvas_length"], self.real["vocab_size"]
            blocks = b * math.ceil(c / max(1, min(c, PER_ROW_BLOCK_BYTES // (4 * v))))
            embed = self.profile["embed_bytes"]
            for part, (kernels, views) in PER_ROW_OPS.items():
                extra = blocks - reads[part]["reads"]
                if part in parts and extra > 0:
                    parts[part]["weights"] += extra * embed
                    parts[part]["kernels"] += extra * kernels
                    parts[part]["views"] += extra * views
                    parts[part]["ops"] += extra * (kernels + views)
                reads[part] = {"reads": max(blocks, reads[part]["reads"]), "mode": "per row (what-if)"}
        self._add(parts, "sampler", self._sampler(b, context))
        commit, meta = self._commit_current(b, context)
        for name, f in commit.items():
            self._add(parts, "cache" if name == "cache" else "encode", f)
        meta["weight_reads"] = {k: v["reads"] for k, v in reads.items()}
        meta["embed_matmul_mode"] = {k: v["mode"] for k, v in reads.items()}
        meta["kernels"] = sum(p.get("kernels", 0) for p in parts.values())
        meta["ops"] = sum(p.get("ops", 0) for p in parts.values())
        c = self.real["canvas_length"]
        return self.finish(
            gpu, parts, self._eager_dispatch(gpu, parts), meta, b * self.knobs.tpf, None, overlap=True
        ) | {"canvas_tokens": b * c}

    def _planned_parts(self, b: int, context: int) -> tuple[dict, dict]:
        ctx_eff = max(1, round(context * (1.0 - self.knobs.spread * (b - 1) / (2 * b))))
        parts = self.fit("denoise", context, b)
        if ctx_eff != context:  # attention over each row's real context
            parts["attention"] = self.fit("denoise", ctx_eff, b)["attention"]
        weights = self.distinct_weights("denoise", "1", context)
        embed = self.profile["embed_bytes"]
        c = self.real["canvas_length"]
        r = b / self.steps_per_canvas()  # rows committing per step, folded into the step's forward
        for name, f in parts.items():
            f["weights"] = weights.get(name, 0.0)
            f["kvcopy"] = 0.0
        att = parts.setdefault("attention", {f: 0.0 for f in FIELDS})
        att["kv"] = self.kv_gqa_bytes(b, ctx_eff)
        parts.pop("cache", None)
        self._add(parts, "cache", {"act": r * c * self.kv_token_bytes(), "kernels": 0})
        parts["moe"]["weights"] += self.expert_bytes("denoise", "1", context, b, extra_tokens=r * c)
        enc = self.fit("commit_full", context, r)
        for name, f in enc.items():
            g = dict(f)
            g["weights"] = g["kvcopy"] = g["kernels"] = g["views"] = g["ops"] = 0.0  # same forward, same kernels
            if name == "encode":  # the re-encode reads the rows' cache and the canvas K/V once, at real heads
                g["kv"] = self.kv_gqa_bytes(r, ctx_eff)
            self._add(parts, "encode", g)
        self._add(parts, "sampler", self._sampler(b, context))
        meta = {
            "weight_reads": {"lm_head": 1 if embed else 0, "selfcond": 1 if weights.get("selfcond") else 0},
            "context_attended": ctx_eff,
            "committed_rows_per_step": r,
        }
        return parts, meta

    def _v_planned(self, gpu: GPU, b: int, context: int) -> dict:
        parts, meta = self._planned_parts(b, context)
        kernels = sum(p.get("kernels", 0) for p in parts.values())
        meta["kernels"] = kernels
        return self.finish(gpu, parts, self._graph_dispatch(gpu, kernels), meta, b * self.knobs.tpf, None)

    def _v_fused(self, gpu: GPU, b: int, context: int) -> dict:
        """What-if: the planned engine with every elementwise op (norms, casts, residual adds, rotary, routing
        glue, softmax passes) fused into the matmul / attention kernels next to it (torch.compile-style):
        activation and logits traffic only at those kernels' inputs and outputs (plus the sampler kernel)."""
        parts, meta = self._planned_parts(b, context)
        sampler = parts.get("sampler", {})
        for name, f in parts.items():
            if name in ("sampler", "cache"):
                continue
            f["act"], f["logits"] = f.get("act_mm", 0.0), f.get("logits_mm", 0.0)
        r = self.real
        sampler["act"] = 0.0
        sampler["logits"] = b * r["canvas_length"] * r["vocab_size"] * 4  # the fused kernel: raw in, processed out
        kernels = sum(p.get("kernels", 0) for p in parts.values())
        meta["kernels"] = kernels
        return self.finish(gpu, parts, self._graph_dispatch(gpu, kernels), meta, b * self.knobs.tpf, None)

    def _v_floor(self, gpu: GPU, b: int, context: int) -> dict:
        """Every weight read once (the tied embedding once for both uses), touched experts once, K/V read once
        at their real heads, new K/V written, FLOPs of the planned step at the achievable peak, one launch."""
        parts, meta = self._planned_parts(b, context)
        flops = sum(p.get("flops", 0.0) for p in parts.values())
        weights = sum(p.get("weights", 0.0) for p in parts.values()) - self.profile["embed_bytes"]
        kv = sum(p.get("kv", 0.0) for p in parts.values())
        new_kv = parts["cache"]["act"]
        floor = {"flops": flops, "bytes": weights + kv + new_kv}
        slim = {
            name: {"flops": p.get("flops", 0.0), "weights": p.get("weights", 0.0), "kv": p.get("kv", 0.0)}
            for name, p in parts.items()
        }
        slim["selfcond"]["weights"] = max(0.0, slim["selfcond"]["weights"] - self.profile["embed_bytes"])
        slim["cache"] = {"flops": 0.0, "act": new_kv}
        # the same bytes and FLOPs with each part at its own roofline, one after another (one stream, no overlap
        # of a compute-bound part with a memory-bound one)
        serial = sum(gpu.ms(p.get("flops", 0.0), self._bytes(p)) for p in slim.values())
        meta = {"weight_reads": {"lm_head": 1, "selfcond": 0}, "kernels": 1, "serial_ms": serial}
        return self.finish(gpu, slim, self._graph_dispatch(gpu, 0), meta, b * self.knobs.tpf, floor)

    def _v_generate(self, gpu: GPU, b: int, context: int) -> dict:
        """transformers' generate(): its traced step (decoder forward with the LM head over all rows, the cache
        concatenated with the canvas K/V per layer, softmax / Categorical sampling over the whole logits), and
        its commit once per canvas for all rows together (the encoder forward appending to the DynamicCache)."""
        parts = self.fit("generate", context, b)
        key = list(self.profile["traces"]["generate"])[0]
        parts.setdefault("moe", {f: 0.0 for f in FIELDS})["weights"] += self.expert_bytes("generate", key, context, b)
        s = self.steps_per_canvas()
        enc = self.fit("commit_full", context, b)
        for name, f in enc.items():
            self._add(parts, "cache" if name == "cache" else "encode", f, 1.0 / s)
        self._add(parts, "encode", {"weights": self.expert_bytes("commit_full", "1", context, b) / s})
        gen1 = self.agg("generate", key, context)
        meta = {
            "weight_reads": {"lm_head": len(gen1["embed"].get("lm_head", [])), "selfcond": 1},
            "kernels": sum(p.get("kernels", 0) for p in parts.values()),
            "ops": sum(p.get("ops", 0) for p in parts.values()),
        }
        return self.finish(gpu, parts, self._eager_dispatch(gpu, parts), meta, b * self.knobs.tpf, None, overlap=True)

    # -- AR
    def _ar(self, gpu: GPU, b: int, context: int, trace: str, tokens: int, tpf: float) -> dict:
        key = list(self.profile["traces"][trace])[0]
        fitted = self.fit(trace, context, b * tokens)
        kv_fit = self.fit(trace, context, b)
        for name in fitted:  # the verify tokens share one read of the cache
            fitted[name]["kv"] = kv_fit.get(name, {}).get("kv", 0.0)
            fitted[name]["kvcopy"] = kv_fit.get(name, {}).get("kvcopy", 0.0)
            fitted[name]["weights"] = kv_fit.get(name, {}).get("weights", 0.0)
            fitted[name]["kernels"] = kv_fit.get(name, {}).get("kernels", 0.0)
            fitted[name]["views"] = kv_fit.get(name, {}).get("views", 0.0)
        fitted.setdefault("moe", {f: 0.0 for f in FIELDS})["weights"] += self.expert_bytes(
            trace, key, context, b * tokens
        )
        meta = {"kernels": sum(p.get("kernels", 0) for p in fitted.values()), "tpf": tpf}
        return self.finish(gpu, fitted, self._eager_dispatch(gpu, fitted), meta, b * tpf, None, overlap=True)

    def _v_ar_same(self, gpu: GPU, b: int, context: int) -> dict:
        """One AR token of the DiffusionGemma weights (the adapter's causal encoder + LM head, eager)."""
        return self._ar(gpu, b, context, "ar_same", 1, self.knobs.ar_tpf)

    def _v_ar_gemma4(self, gpu: GPU, b: int, context: int) -> dict:
        """One token of Gemma 4 (same shapes) through transformers' generate(), eager."""
        return self._ar(gpu, b, context, "gemma4", 1, self.knobs.ar_tpf)

    def _v_ar_mtp(self, gpu: GPU, b: int, context: int) -> dict:
        """Gemma 4 verifying 1 + mtp_draft tokens per row per step (the drafter itself not counted), eager."""
        return self._ar(gpu, b, context, "gemma4", 1 + self.knobs.mtp_draft, self.knobs.mtp_tpf)

    def _v_ar_floor(self, gpu: GPU, b: int, context: int) -> dict:
        """One AR token at the roofline: touched weights and K/V read once, one launch."""
        key = list(self.profile["traces"]["gemma4"])[0]
        fitted = self.fit("gemma4", context, b)
        flops = sum(p["flops"] for p in fitted.values())
        weights = sum(self.distinct_weights("gemma4", key, context).values())
        weights += self.expert_bytes("gemma4", key, context, b)
        kv = self.kv_gqa_bytes(b, context) - b * self.real["canvas_length"] * self.kv_token_bytes()
        floor = {"flops": flops, "bytes": weights + kv + b * self.kv_token_bytes()}
        slim = {"moe": {"flops": flops, "weights": weights}, "attention": {"kv": kv}}
        meta = {"kernels": 1, "tpf": self.knobs.ar_tpf}
        return self.finish(gpu, slim, self._graph_dispatch(gpu, 0), meta, b * self.knobs.ar_tpf, floor)
