"""Our runs of the dLLM leaderboard's tasks beside the leaderboard's published rows, one figure per task.

`experiment=d3llm_leaderboard` runs GSM8K (CoT), MATH, HumanEval and MBPP with d3LLM's protocol (evals/code_tasks,
evals/math_reasoning); the sweep summary (`harness.figures.pareto.make_report`) then draws, for each of those evals,
accuracy (percent) against tokens per forward:

- our runs as filled markers, one series per model, with its AUP (`harness.analysis.aup.aup_d3llm` over its Pareto
  front) against the y_max of our runs and the published rows together, as the leaderboard would score a new method
  (the summary's `aup_d3llm` takes our runs' y_max alone);
- the published d3LLM-LLaDA, d3LLM-Dream, Fast-dLLM-v2 and EAGLE-3 points (`d3llm_published.yaml`, with its source)
  as hollow markers joined by dashed lines, labelled "published, not re-run", each with the AUP the leaderboard's
  formula gives it against its own table's y_max.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from harness.analysis.aup import aup_d3llm

PUBLISHED = Path(__file__).with_name("d3llm_published.yaml")


@dataclass(frozen=True)
class PublishedRow:
    method: str
    table: str  # the leaderboard data file it comes from
    task: str  # the leaderboard's task name
    y_max: float
    points: tuple[tuple[float, float], ...]  # (TPF, accuracy in percent)

    @property
    def aup(self) -> float:
        tpf, acc = zip(*self.points, strict=True)
        return aup_d3llm(tpf, acc, self.y_max)


@cache
def published() -> tuple[str, str, dict[str, tuple[PublishedRow, ...]]]:
    """(source URL, label, {our eval name: its published rows})."""
    data = yaml.safe_load(PUBLISHED.read_text(encoding="utf-8"))
    rows = {
        ev: tuple(
            PublishedRow(r["method"], r["table"], r["task"], float(r["y_max"]), tuple(map(tuple, r["points"])))
            for r in rs
        )
        for ev, rs in data["tasks"].items()
    }
    return data["source"], data["label"], rows


def _our_points(runs: pd.DataFrame, published_y_max: float) -> list[tuple[str, pd.DataFrame]]:
    """(legend label, runs sorted by TPF) per model, for the runs with both numbers. Each label carries the model's
    AUP over its Pareto front (`on_front`, as the summary scores it) against the y_max the leaderboard would use with
    our runs added to its table: the best accuracy of our runs and of the published rows of this task."""
    runs = runs.assign(_acc=100 * pd.to_numeric(runs["quality"], errors="coerce"))
    runs = runs.dropna(subset=["tpf", "_acc"]).sort_values("tpf")
    y_max = max([published_y_max, *runs["_acc"]])
    out = []
    for model, g in runs.groupby("model", sort=True):
        front = g[g["on_front"].astype(bool)] if "on_front" in g else g
        aup = aup_d3llm(front["tpf"], front["_acc"], y_max) if y_max > 0 and (front["tpf"] > 0).all() else float("nan")
        out.append((f"{model} (ours, AUP {aup:.1f} at y_max {y_max:.1f})", g))
    return out


def leaderboard_figure(runs: pd.DataFrame, eval_name: str) -> Figure:
    """Accuracy vs TPF on one leaderboard task: our runs and the published rows (see the module docstring)."""
    source, label, rows = published()
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    y_max = max([r.y_max for r in rows.get(eval_name, ())], default=0.0)
    for i, (name, g) in enumerate(_our_points(runs, y_max)):
        ax.plot(g["tpf"], g["_acc"], marker="o", markersize=8, linestyle="-", color=f"C{i}", label=name)
    for j, row in enumerate(rows.get(eval_name, ())):
        tpf, acc = zip(*row.points, strict=True)
        ax.plot(
            tpf,
            acc,
            marker="s",
            markersize=8,
            markerfacecolor="none",
            linestyle="--",
            color=f"C{j + 5}",
            label=f"{row.method}: {row.task} ({label}; AUP {row.aup:.1f})",
        )
    ax.set_xlabel("tokens per forward (TPF)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{eval_name}: our runs beside d3LLM's published leaderboard rows\n{source}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.08, y=0.1)
    ax.legend(fontsize=7, loc="best")
    return fig


def leaderboard_figures(table: pd.DataFrame) -> dict[str, Figure]:
    """{figure stem: figure} for every leaderboard task among the table's evals (none when there is none). The table's
    `eval` is the eval's identity (`<name>-n<items>-<hash>`); its `eval_name` says which task it is."""
    _, _, rows = published()
    if table.empty or "eval" not in table:
        return {}
    out = {}
    for ev, g in table.groupby("eval", sort=True):
        name = str(g["eval_name"].iloc[0]) if "eval_name" in g else str(ev)
        if name in rows:
            out[f"leaderboard_{ev}"] = leaderboard_figure(g, name)
    return out
