"""Device helpers that `bench.gpu.gpu_check` and its measurement modules share: whether a device is CUDA, the CUDA
memory readings the phases record, the peak reset before a measurement, and seeded random prompts (drawn with a
CPU generator, so the same ids on every device)."""

from __future__ import annotations

import torch


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def memory_gib(device: str) -> dict[str, float]:
    if not is_cuda(device):
        return {}
    return {
        "allocated_gib": torch.cuda.memory_allocated() / 2**30,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def reset_peak_memory(device: str) -> None:
    if is_cuda(device):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def random_prompts(v: int, n: int, lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, v, (lengths[i],), generator=g).tolist() for i in range(n)]
