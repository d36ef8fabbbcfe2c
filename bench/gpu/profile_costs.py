"""What every variant prediction builds on: a profile's traces as per-part costs, and a step's times from them.

Its own module so that `bench.gpu.cost_model` holds the variants themselves. `ProfileCosts` sums each trace per part
at a context (cached), fits the sums in the batch, prices the expert weights the tokens touch and the K/V at the
real config's heads, and turns a step's parts into times: per part max(FLOPs / achievable FLOP/s, bytes /
achievable bandwidth); a step is the sum over parts plus the host time its GPU work does not hide (eager
launches overlap it; a CUDA graph's launch does not). These are arithmetic predictions, not measurements.
"""

from __future__ import annotations

from bench.gpu.gpu_specs import GPU
from bench.gpu.op_costs import BYTES, FIELDS, PARTS, Shapes, aggregate, fit_parts, touched_fraction


class ProfileCosts:
    """Per-part costs from one profile (see `bench.gpu.plan_profile.build_profile`); `experts_per_canvas`: None for
    uniform routing, else the touched-expert count one canvas calibrates (`touched_fraction`)."""

    def __init__(self, profile: dict, experts_per_canvas: float | None = None):
        self.profile, self.experts_per_canvas = profile, experts_per_canvas
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
            tokens, r["num_experts"], r["top_k_experts"], self.experts_per_canvas, r["canvas_length"]
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
