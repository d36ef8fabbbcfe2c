"""Per-layer MoE expert activation figure from the runs' `experts_per_forward` (models/instruments/expert_counter.py).

    python -m harness.figures.experts_plot RUN_OR_SWEEP_DIR... [--out DIR]

One figure per model (its first run that recorded the metric; the routing hardly depends on the sampler):
distinct experts touched per layer, mean over forwards, for each forward kind: per row (one sequence's
canvas or token: the report's "~84 of 128 per denoiser forward vs 8 per AR token") solid, and over the whole
batch of the forward dashed; the top-k line marks what a single token touches.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

KIND_COLOURS = {"denoise": "C3", "prefill": "C0", "commit": "C2", "ar": "C1"}


def experts_figure(experts: dict[str, Any], title: str) -> Figure:
    kinds = [k for k, v in experts.items() if isinstance(v, dict)]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    for kind in sorted(kinds, key=lambda k: list(KIND_COLOURS).index(k) if k in KIND_COLOURS else 99):
        rec, colour = experts[kind], KIND_COLOURS.get(kind)
        layers = range(len(rec["per_layer_mean"]))
        row = rec["per_row"]
        ax.plot(
            layers, row["per_layer_mean"], marker=".", color=colour, label=f"{kind}: per row (mean {row['mean']:.1f})"
        )
        ax.plot(
            layers, rec["per_layer_mean"], ls="--", color=colour, label=f"{kind}: whole batch ({rec['forwards']} fwd)"
        )
    ax.axhline(experts["top_k"], color="grey", lw=0.8, ls=":", label=f"top-k = {experts['top_k']}")
    ax.set_ylim(0, experts["num_experts"] * 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("MoE layer")
    ax.set_ylabel(f"distinct experts per forward (of {experts['num_experts']})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return fig


def experts_figures(run_dirs: list[Path], out_dir: str | Path) -> list[Path]:
    """`experts_<model>.png` under `out_dir` for each model whose runs recorded `experts_per_forward`."""
    from harness.runner.store import read_metrics

    seen: dict[str, dict[str, Any]] = {}
    for run_dir in sorted(run_dirs):
        try:
            m = read_metrics(run_dir)
        except (OSError, ValueError):
            continue
        model = str(m.get("run", {}).get("model", Path(run_dir).name))
        if m.get("experts_per_forward") and model not in seen:
            seen[model] = m["experts_per_forward"]
    out = Path(out_dir)
    written = []
    for model, experts in seen.items():
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"experts_{re.sub(r'[^A-Za-z0-9_.-]+', '_', model)}.png"
        experts_figure(experts, f"{model}: MoE experts touched per forward, by layer").savefig(path, dpi=120)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    from harness.analysis.aggregate import find_run_dirs

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run dirs or folders holding them")
    p.add_argument("--out", default=None, help="output folder (default: the first path)")
    a = p.parse_args(argv)
    for path in experts_figures(find_run_dirs(a.paths).complete, a.out or a.paths[0]):
        print(path)


if __name__ == "__main__":
    main()
