"""Per-user and total tokens/s vs concurrency for the AR, AR + draft and diffusion decoders (`bench.cpu.ar_engine`'s
section 4), and its figure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.cpu.ar_workload import CPU_NOTE, race, requests
from bench.cpu.common import median


def concurrency(decoders: dict[str, Any], ev, levels: list[int], n_of, repeats: int) -> list[dict[str, Any]]:
    """Per-user and total tokens/s of each decoder with c requests in flight (n_of(c) requests streamed)."""
    return [row for c in levels for row in _concurrency_level(decoders, ev, c, n_of(c), repeats)]


def _concurrency_level(decoders: dict[str, Any], ev, c: int, n: int, repeats: int) -> list[dict[str, Any]]:
    reqs = {name: requests(d, ev, n) for name, d in decoders.items()}
    rec: dict[str, list[tuple[float, float]]] = {name: [] for name in decoders}

    def make(name):
        def call():
            t0 = time.perf_counter()
            res = list(decoders[name].stream(reqs[name], batch_size=c))
            wall = time.perf_counter() - t0
            toks = sum(len(r.token_ids) for r in res)
            per_user = sum(len(r.token_ids) / r.latency_s for r in res if r.latency_s > 0) / len(res)
            rec[name].append((toks / wall, per_user))
            return toks

        return call

    times, last = race({name: make(name) for name in decoders}, repeats)
    rows = []
    for name in decoders:
        kept = rec[name][-repeats:]  # the warm-up round left out
        rows.append(
            {
                "decoder": name,
                "concurrency": c,
                "requests": n,
                "tokens": last[name],
                "total_tokens_per_s": median([t for t, _ in kept]),
                "per_user_tokens_per_s": median([u for _, u in kept]),
                "median_s": median(times[name]),
            }
        )
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in (
        (axes[0], "per_user_tokens_per_s", "per-user tokens/s (mean of tokens / latency)"),
        (axes[1], "total_tokens_per_s", "total tokens/s (all tokens / wall)"),
    ):
        for name in dict.fromkeys(r["decoder"] for r in rows):
            rs = sorted((r for r in rows if r["decoder"] == name), key=lambda r: r["concurrency"])
            ax.plot([r["concurrency"] for r in rs], [r[key] for r in rs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("tokens/s")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("6x6 Sudoku decoders vs concurrency: " + CPU_NOTE, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
