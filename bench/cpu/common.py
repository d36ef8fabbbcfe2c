"""Shared bench helpers: machine facts, interleaved side-by-side timing, JSON output, a text table.

Absolute times on a shared 2-core CPU are noisy; ratios of medians measured in one process, with the
contenders interleaved round by round, are what the benches report.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

OUT_DIR = Path("outputs/bench")


def machine_info() -> dict[str, Any]:
    """CPU model, cores, torch threads and versions: printed and stored with every bench result."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    info = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def sync(device: str | torch.device = "cpu") -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1, device: str = "cpu"
) -> dict[str, list[float]]:
    """Wall seconds per call for each contender, alternating them each round so load drifts hit all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
            sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio_stats(slow: list[float], fast: list[float]) -> dict[str, float]:
    """Ratio of medians and the median of per-round ratios (robust when load changes between rounds)."""
    return {
        "ratio_of_medians": median(slow) / median(fast),
        "median_round_ratio": median([s / f for s, f in zip(slow, fast)]),
    }


def write_json(name: str, payload: dict[str, Any], out_dir: Path | str = OUT_DIR) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A fixed-width text table; floats get 4 significant digits."""

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def print_machine(info: dict[str, Any]) -> None:
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)


def quick_cli(doc: str, run: Callable[..., Any], argv: list[str] | None = None) -> Any:
    """`python -m bench.<name> [--quick] [--out-dir DIR]`: parse the two flags every bench takes and run it."""
    import argparse

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    return run(a.quick, a.out_dir)
