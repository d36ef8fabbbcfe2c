"""The GPUs the cost model prices a step on, and the technical report's figures it is compared with.

Its own module because it is data (dense bf16 peak and HBM bandwidth per GPU, the shares of them a well-tuned
kernel reaches, the host's launch costs) that `bench.gpu.cost_model` (the variants' times), `bench.gpu.gpu_plan` (the
CLI's GPUs, the report comparison) and `bench.gpu.gpu_estimates` (a CUDA device's entry) read without the costing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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


def gpu_spec(gpu: str | GPU, **overrides) -> GPU:
    g = gpu if isinstance(gpu, GPU) else GPUS[gpu.lower().replace(" ", "").replace("sxm", "").replace("80gb", "")]
    if overrides:
        g = GPU(**{**asdict(g), **{k: v for k, v in overrides.items() if v is not None}})
    return g
