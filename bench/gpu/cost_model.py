"""GPU cost-model predictions for `bench.gpu.gpu_plan`: one step of each variant, its per-part roofline times.

No torch here: the predictions turn a *profile* (the aten ops of one real forward of a narrow twin of the
config, recorded by `bench.gpu.plan_profile.build_profile`) into predicted per-step costs at the real widths, for the
diffusion engine as it runs (eager, compiled, the what-ifs, the floor, transformers' generate()) and for AR
decoding (the same weights, Gemma 4, AR+MTP, the AR floor). Per op costs and the fits are `bench.gpu.op_costs`,
the per-part costs of a profile and a step's times `bench.gpu.profile_costs`, the GPUs `bench.gpu.gpu_specs`.
These are arithmetic predictions, not measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bench.gpu.gpu_specs import GPU, REPORT
from bench.gpu.op_costs import FIELDS, bilinear_parts, embed_reads
from bench.gpu.profile_costs import ProfileCosts

DIFFUSION = ("current", "compiled", "compiled_tmoe", "per_row", "planned", "fused", "generate", "floor")
AR = ("ar_same", "ar_gemma4", "ar_mtp", "ar_floor")
VARIANTS = DIFFUSION + AR


# the pre-`models.kernels.logits_blocks` denoise: per batch row, per block of this many float32 logits bytes, one
# LM-head
# matmul (1 kernel, 4 views) and one self-conditioning block (slice, cast, softmax, cast, matmul, scale, copy:
# 6 kernels, 5 views), as traced from that code
PER_ROW_BLOCK_BYTES = 64 << 20
PER_ROW_OPS = {"lm_head": (1, 4), "selfcond": (6, 5)}


@dataclass
class Knobs:
    tpf: float = REPORT["diffusion"]["tpf"]
    ar_tpf: float = REPORT["ar"]["tpf"]
    mtp_tpf: float = REPORT["ar_mtp"]["tpf"]
    mtp_draft: int = 1  # draft tokens verified per AR+MTP step (the drafter's own forward is not modelled)
    experts_per_canvas: float | None = None  # None: uniform routing; 84: the report's count for one canvas
    # rows' contexts uniform in [ctx (1 - spread), ctx], the longest at ctx: planned / floor attend each row's own
    # (mean ctx (1 - spread (B - 1) / 2B)); current / compiled / generate pad every row to the longest
    spread: float = 0.0
    # slots the cache holds per row (a run reserves prompt + max_new_tokens at admission); None: just the context.
    # Neither engine attends them: both attend up to the longest row (`compiled`: rounded up to its span quantum)
    capacity: int | None = None


class Model(ProfileCosts):
    """Predictions from one profile (see `bench.gpu.plan_profile.build_profile`)."""

    def __init__(self, profile: dict, knobs: Knobs | None = None):
        self.knobs = knobs or Knobs()
        super().__init__(profile, self.knobs.experts_per_canvas)

    def steps_per_canvas(self) -> float:
        return self.real["canvas_length"] / self.knobs.tpf

    # -- the engine's parts
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

    def _step_graph_parts(self, rows: int, k: int, context: int, experts: str = "") -> dict:
        """The traced step graph over `rows` rows with k commit entries folded in (k = 0: none), at `context`: the
        whole step fit at B = 1, 2 (`whole_step`), with a commit the bilinear fit of the joint graph at (rows,
        entries) = (1, 1), (2, 1), (2, 2) (`joint_step`); the touched experts for rows + k canvases of tokens.
        `experts`: the traces' suffix ("_tmoe": the graphs traced with `model.experts=triton`)."""
        if k == 0:
            trace, key = "whole_step" + experts, "1"
            parts = self.fit(trace, context, rows)
        else:
            trace, key = "joint_step" + experts, "1,1"
            p = {key: self.agg(trace, key, context)["parts"] for key in ("2,1", "2,2", "1,1")}
            parts = bilinear_parts(p["2,1"], p["2,2"], p["1,1"], rows, k, b0=2)
        parts.setdefault("moe", {f: 0.0 for f in FIELDS})["weights"] += self.expert_bytes(trace, key, context, rows + k)
        return parts

    def _v_compiled_tmoe(self, gpu: GPU, b: int, context: int) -> dict:
        """`compiled` with `model.experts=triton`: the MoE layers run `models.kernels.fused_moe`'s two kernels (token
        rows
        read in place, GELU(gate) * up written from float32 accumulators, routing weights applied in the down
        kernel) instead of transformers' grouped_mm path and the copies between its kernels."""
        return self._v_compiled(gpu, b, context, experts="_tmoe")

    def _v_compiled(self, gpu: GPU, b: int, context: int, experts: str = "") -> dict:
        """The engine with `model.compile=step` on CUDA (`mode="reduce-overhead"`): the step's graph as traced
        (`harness.engine.step_graph`) over its power-of-two bucket of rows, its elementwise ops fused by inductor's
        rules
        (`bench.gpu.fusion`), replayed as one CUDA graph; full layers attend the slots up to the longest row, rounded
        up to `SPAN_QUANTUM` (a dynamic size: what the cache reserves beyond it costs nothing). Commits fold into
        the step (`WholeStep.with_commit`): on a step where some rows stopped the step before (each with
        probability TPF / C, independently), their re-encode runs as a bucket of k more entries of the same graph.
        Expected over the binomial count of committing rows; one launch per step."""
        from harness.engine.step_graph import SPAN_QUANTUM
        from models.cache.slot_cache import bucket

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
            f = self._step_graph_parts(rows, kb, context, experts)
            if held != context:  # the full layers' span is past the traced context + 2C
                f["attention"] = self._step_graph_parts(rows, kb, held, experts)["attention"]
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
        """What-if: the engine before `models.kernels.logits_blocks`, the LM head and the self-conditioning matmul once
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
