"""One MoE layer's experts, transformers' `grouped_mm` vs `models.kernels.fused_moe` (`model.experts=triton`), side by
side.

`bench.gpu.gpu_check`'s `experts` phase: at the model's shapes (the released ones on a GPU: 128 experts top-8,
hidden 2,816, expert FFN 704) and B canvases of tokens, layer 0's experts run on the same states and routing
(the layer's own router over random states: near-uniform, as with random weights) through both
implementations. Per batch: the median wall time of each (interleaved rounds, synchronised), their ratio and
the largest difference relative to the largest output. `make gpu-plan`'s `compiled_tmoe` row is the prediction
this checks. On the CPU the fused kernels run only under Triton's interpreter (TRITON_INTERPRET=1: tests), where
their time means nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.cpu.common import interleaved, median
from models.kernels import fused_moe

COLUMNS = ["batch", "pairs", "grouped_mm_ms", "triton_ms", "speedup", "max_rel_diff"]


@torch.no_grad()
def compare(model, batch: int, canvas: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """Layer 0's experts over `batch` x `canvas` tokens: grouped_mm vs the fused kernels (see the module doc)."""
    layer = model.model.decoder.layers[0]
    experts, router = layer.experts, layer.router
    text = model.config.get_text_config()
    before = text._experts_implementation
    param = next(experts.parameters())
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(batch * canvas, text.hidden_size, generator=g).to(param.device, param.dtype)
    _, weights, index = router(x)

    def run(impl: str):
        text._experts_implementation = impl
        return experts(x, index, weights)

    try:
        ref, ours = run("grouped_mm"), run(fused_moe.NAME)
        times = interleaved(
            {"grouped_mm": lambda: run("grouped_mm"), "triton": lambda: run(fused_moe.NAME)},
            repeats=repeats,
            device=str(param.device),
        )
    finally:
        text._experts_implementation = before
    diff = (ours.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)
    gm, tr = median(times["grouped_mm"]) * 1e3, median(times["triton"]) * 1e3
    return {
        "batch": batch,
        "pairs": index.numel(),
        "grouped_mm_ms": gm,
        "triton_ms": tr,
        "speedup": gm / tr if tr else float("nan"),
        "max_rel_diff": float(diff),
    }
