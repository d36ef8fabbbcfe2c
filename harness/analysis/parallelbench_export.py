"""A sweep's ParallelBench runs in the leaderboard's own files (parallelbench.github.io, `data/`), so a user can add
their model to it: `data/leaderboard/<model>.json` ({"thresholds": [80, 75, 70], "results": {strategy: {"80": PB80,
...}}}), `data/figures/<model>/<strategy>.csv` (task, tps, accuracy per setting, with the `avg` row the chart and
PBx read) and a `metadata_entry.json` with the model's and strategies' entries for `data/metadata.json`.

Speed is ParallelBench's tokens-per-step (`pb_tokens_per_step`: max_tokens / mean NFE), the leaderboard's axis, not
our TPF. Tasks are named by the site's ids (`waitingline-copy`...). Called by the export command's `parallelbench`
target (`export_parallelbench`) or directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.parallelbench import THRESHOLDS, pbx, setting_points, strategy_groups


def _strategies(table: pd.DataFrame) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """(model id, strategy id, its runs) for every ParallelBench strategy in a summary table."""
    for key, group in strategy_groups(table):
        rule, label = key["sampler"], key["label"]
        strategy = rule if rule != "-" else label  # AR runs have no sampler rule: their decoder label
        yield str(key["model"]), str(strategy), group


def to_leaderboard_json(table: pd.DataFrame, thresholds: tuple[int, ...] = THRESHOLDS) -> dict[str, dict[str, Any]]:
    """{model id: the site's `data/leaderboard/<model>.json` content} from a summary table (aggregate.collect)."""
    out: dict[str, dict[str, Any]] = {}
    for model, strategy, runs in _strategies(table):
        points = setting_points(runs, "pb_tokens_per_step")
        board = out.setdefault(model, {"thresholds": list(thresholds), "results": {}})
        board["results"][strategy] = {str(x): pbx(points["x"], points["score"], x) for x in thresholds}
    return out


def figure_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One strategy's `data/figures/<model>/<strategy>.csv`: per setting, each task's row, then `avg` over the tasks
    that every setting ran (the row PBx reads)."""
    points = setting_points(runs, "pb_tokens_per_step")
    knobs = [c for c in runs if c.startswith("sampler.") and runs[c].notna().any()]
    keyed = runs.assign(_setting=runs[knobs].map(str).agg("|".join, axis=1) if knobs else "")
    rows = []
    for setting, group in keyed.groupby("_setting", sort=False):
        for _, r in group.iterrows():
            rows.append({"task": r["pb_site_id"], "tps": r["pb_tokens_per_step"], "accuracy": r["quality"] * 100})
        avg = points[points["_setting"] == setting].iloc[0]
        rows.append({"task": "avg", "tps": avg["x"], "accuracy": avg["score"]})
    return pd.DataFrame(rows, columns=["task", "tps", "accuracy"])


def write_leaderboard(table: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """The site's files for every model in the table under `out_dir/data/`, and `metadata_entry.json`; nothing
    (an empty list) when the table holds no ParallelBench run."""
    if not any(True for _ in _strategies(table)):
        return []
    root = Path(out_dir) / "data"
    files: list[Path] = []
    for model, board in to_leaderboard_json(table).items():
        path = root / "leaderboard" / f"{model}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(board, indent=2) + "\n")
        files.append(path)
    models: dict[str, list[str]] = {}
    for model, strategy, runs in _strategies(table):
        path = root / "figures" / model / f"{strategy}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        figure_rows(runs).to_csv(path, index=False)
        files.append(path)
        models.setdefault(model, []).append(strategy)
    entry = {
        "strategies": [{"id": s, "displayName": s} for s in sorted({s for v in models.values() for s in v})],
        "models": [{"id": m, "family": m, "displayName": m, "strategies": s} for m, s in models.items()],
    }
    meta = Path(out_dir) / "metadata_entry.json"
    meta.write_text(json.dumps(entry, indent=2) + "\n")
    return [*files, meta]


def export_parallelbench(paths: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """The export command's `parallelbench` target: collect the run dirs under `paths`, write the site's files."""
    from harness.analysis.aggregate import collect

    return write_leaderboard(collect(paths), out_dir)
