"""d3LLM's AUP leaderboard rows (hao-ai-lab/d3LLM, AUP_leaderboard; the blog's `dLLM_Results.csv`), from our samples.

Two files:
- `d3llm_leaderboard.csv`, in the leaderboard CSV's layout: a section line (`,<sweep>:`), a line of task names (one
  every four columns), the column line (`token/forward (TPF),Acc,AUP,TPF=1时的Acc` per task, their header as they
  wrote it), then one line per method: `,<method>,<TPF>,<Acc>,<AUP>,<Acc at the slowest point>` per task. A method
  is a model (with its environment where the sweep holds several, `harness.analysis.environments`) and its points
  are its Pareto front on the task, as in our summary; the row shows the fastest point the AUP keeps (TPF, accuracy
  in percent) and, in the fourth column, the accuracy of the front's slowest point (the leaderboard's "Acc at
  TPF=1": its methods' slowest setting is one token per forward; ours is the front's slowest run, whatever its TPF).
- `d3llm_points.yaml`, in the format of their `data_*.yaml`: task -> method -> [[TPF, accuracy], ...], every point
  the AUP integrates, so their `get_aup` recomputes each AUP from it.
- `d3llm_dropped.yaml`, only where some front lost points: task -> method -> `dropped` (the [TPF, accuracy] front
  points more than 5 accuracy points below its slowest, which the AUP leaves out) and `d3llm_refuses` (true where
  the fastest point is among them: the leaderboard's `get_aup` asserts on such a method and gives no AUP; ours
  scores the kept points). Each such front is also a warning.

A likelihood run (lm-eval's multiple-choice tasks, scored without decoding) is a line of its own, `<model> (<scoring
method>)`, with its accuracy and empty TPF, AUP and slowest-point cells: it has no TPF, so no point to integrate.

TPF and accuracy are recounted from each run's samples (`harness.export.runs`), and the AUP goes through the one AUP
path of the summary (`harness.analysis.fronts.annotate_fronts`, `harness.analysis.aup`): the export's AUP is the
summary's. Tasks are our eval names (the eval identity where one name covers several item sets).
"""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.analysis.aup import Y_MIN_OFFSET, split_points
from harness.analysis.fronts import annotate_fronts

COLUMNS = ("token/forward (TPF)", "Acc", "AUP", "TPF=1时的Acc")


def task_names(table: pd.DataFrame) -> dict[str, str]:
    """Eval identity -> the task name shown: the eval's name, or its identity where the name covers several."""
    names = table.groupby("eval_name", dropna=False)["eval"].nunique()
    pairs = zip(table["eval"], table["eval_name"])
    return {ev: (str(name) if names.get(name, 0) == 1 else str(ev)) for ev, name in pairs}


def leaderboard_rows(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, dict[str, list[list[float]]]], dict]:
    """One row per (method, task): TPF, Acc (percent) of the fastest kept front point, AUP, Acc of the slowest; the
    points per task and method; and the dropped points where there are any (warned about). `table`'s `tpf` and
    `quality` are the ones the AUP is computed from; its likelihood-only runs (`scoring`) get rows of their own
    (`likelihood_rows`)."""
    scored = table["scoring"].notna() if "scoring" in table else pd.Series(False, index=table.index)
    names = task_names(table)
    marked, _ = annotate_fronts(table[~scored])
    rows, points, dropped = [], {}, {}
    for (model, ev), g in marked[marked["on_front"]].groupby(["model", "eval"], sort=True):
        g = g[g["tpf"] > 0].dropna(subset=["quality"])
        if g.empty:
            continue
        pts = split_points(g["tpf"], 100 * g["quality"])
        x, y, task = pts.tpf, pts.accuracy, names[ev]
        if pts.dropped:
            dropped.setdefault(task, {})[str(model)] = {
                "dropped": [list(p) for p in pts.dropped],
                "d3llm_refuses": pts.d3llm_refuses,
            }
            refuses = "; d3LLM's get_aup refuses this method (its fastest point is among them)"
            warnings.warn(
                f"d3llm export: {model} on {task}: {len(pts.dropped)} front point(s) more than {Y_MIN_OFFSET:g} "
                f"accuracy points below the slowest left out of the AUP{refuses if pts.d3llm_refuses else ''} "
                "(d3llm_dropped.yaml)",
                stacklevel=2,
            )
        rows.append(
            {
                "method": model,
                "task": task,
                "tpf": float(x[-1]),
                "acc": float(y[-1]),
                "aup": float(g["aup_d3llm"].iloc[0]),
                "acc_slowest": float(y[0]),
            }
        )
        points.setdefault(task, {})[str(model)] = [[float(a), float(b)] for a, b in zip(x, y)]
    rows += likelihood_rows(table[scored], names)
    return pd.DataFrame(rows, columns=["method", "task", "tpf", "acc", "aup", "acc_slowest"]), points, dropped


def likelihood_rows(table: pd.DataFrame, names: dict[str, str]) -> list[dict[str, Any]]:
    """A likelihood run (lm-eval's multiple-choice tasks scored, nothing generated) has an accuracy but no TPF, so no
    point on a front and no AUP: one row per run, `<model> (<scoring method>)` (with its run name where the model
    has several such runs on the task), its TPF, AUP and slowest-point cells empty; none in the points file."""
    rows = []
    for (model, ev), g in table.dropna(subset=["quality"]).groupby(["model", "eval"], sort=True):
        for _, r in g.iterrows():
            method = f"{model} ({r['scoring']})" + (f" {r['run_name']}" if len(g) > 1 else "")
            nan = math.nan
            rows.append({"method": method, "task": names[ev], "tpf": nan, "acc": 100 * float(r["quality"]),
                         "aup": nan, "acc_slowest": nan})  # fmt: skip
    return rows


def write_leaderboard_csv(rows: pd.DataFrame, section: str, path: Path) -> Path:
    """Their layout (see the module docstring); a method without a point on a task leaves its four cells empty."""
    tasks = sorted(rows["task"].unique())
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["", f"{section}:"] + [""] * 4 * len(tasks))
        w.writerow(["", ""] + [c for t in tasks for c in (t, "", "", "")])
        w.writerow(["", ""] + list(COLUMNS) * len(tasks))
        for method, g in rows.groupby("method", sort=True):
            by_task = g.set_index("task")
            cells = []
            for t in tasks:
                if t in by_task.index:
                    r = by_task.loc[t]
                    cells += [_cell(r["tpf"], 2), _cell(r["acc"], 2), _cell(r["aup"], 4), _cell(r["acc_slowest"], 2)]
                else:
                    cells += [""] * 4
            w.writerow(["", method, *cells])
    return path


def _cell(value: float, digits: int) -> str:
    return "" if math.isnan(value) else f"{value:.{digits}f}"


def export_d3llm(table: pd.DataFrame, out: Path, section: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows, points, dropped = leaderboard_rows(table)
    csv_path = write_leaderboard_csv(rows, section, out / "d3llm_leaderboard.csv")
    yaml_path = out / "d3llm_points.yaml"
    yaml_path.write_text(yaml.safe_dump(points, sort_keys=True, allow_unicode=True))
    files = [csv_path, yaml_path]
    if dropped:
        files.append(out / "d3llm_dropped.yaml")
        files[-1].write_text(yaml.safe_dump(dropped, sort_keys=True, allow_unicode=True))
    return files
