"""Traced op records -> FLOPs and bytes per part at the real widths and context, and their fits in the batch.

Its own module because this is the arithmetic on single ops and on a trace's sums, the same for every variant
and every GPU: `bench.gpu.profile_costs` and `bench.gpu.cost_model` build the predictions on it, `bench.gpu.gpu_plan`
rescales the twin's parameters with `Shapes`. No torch here.

Per op, each tensor shape of the twin is rescaled to the real model: a dimension equal to a twin width
(hidden, dense FFN, expert FFN and its doubled gate/up width) becomes the real width; inside attention
and cache ops a dimension equal to the twin's cached context (or context + canvas, + 1 token, + 2
canvases) becomes the target context (sliding layers: min(context, window - 1)). FLOPs come from the
rescaled shapes (matmuls, grouped matmuls, SDPA; 1 per output element otherwise), bytes from the
rescaled inputs and outputs of every kernel (views move nothing). Quantities are then fitted linearly in
the batch from two traces (B=1 and B=3 for the adapter: exact for code whose per-step work is a fixed
part plus a per-row part). Expert weights are the exception: each grouped matmul reads the experts its
tokens touch, 128 * (1 - (1 - 8/128)^tokens) of 128 (uniform routing) or a calibrated count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bench.gpu.fusion import GATHER

PARTS = ("attention", "moe", "mlp", "lm_head", "selfcond", "sampler", "cache", "encode", "other")
FIELDS = ("flops", "weights", "kv", "kvcopy", "logits", "act", "kernels", "views", "ops", "act_mm", "logits_mm")
BYTES = ("weights", "kv", "kvcopy", "logits", "act")


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
    elif kind == "moe":  # models.kernels.fused_moe: each output row is one pair through its expert's (E, N, K) weight
        w = next(s for s, _, role, _ in ins if role == "x")
        cost["flops"] = 2.0 * outs[0][0][0] * w[-2] * w[-1]
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
        n = float(_numel(s) * b) * mem_in[i]  # 0: read inside a fused kernel (`bench.gpu.fusion`)
        if gather and i == 0:  # an indexed read loads what it picks (a chunk of each logits row), not its source
            n = min(n, out_bytes)
        if role == "x" and kind in ("gmm", "moe"):  # expert weights: what the tokens touch, added by the caller
            experts.append((n, rec["tokens_per_row"]))
        elif role in ("w", "e"):
            if kind in ("mm", "gmm", "moe"):
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
    if kind in ("mm", "gmm", "moe", "sdpa"):  # what stays when every elementwise op is fused into these kernels
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
    for part in sorted(set(p1) | set(p2)):  # a fixed order: the same float sums in every run
        a, b = p1.get(part, {}), p2.get(part, {})
        out[part] = {f: max(0.0, _lin(a.get(f, 0.0), b.get(f, 0.0), x1, x2, x)) for f in FIELDS}
    return out


def bilinear_parts(p31: dict, p32: dict, p21: dict, b: float, k: float, b0: int = 3) -> dict[str, dict[str, float]]:
    """v(B, k) = v(b0,1) + (B-b0) [v(b0,1) - v(b0-1,1)] + (k-1) [v(b0,2) - v(b0,1)] (batch rows, committing rows;
    the arguments are v(b0,1), v(b0,2) and v(b0-1,1))."""
    out = {}
    for part in sorted(set(p31) | set(p32) | set(p21)):
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
