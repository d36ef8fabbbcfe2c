"""ParallelBench scores at matched tokens-per-step, per task group and strategy, with intervals and a dominance test.

PBx says how fast a strategy can go before it drops below x%; this says how good each is at a given speed, which is
the comparison between families: per task group (Waiting Line, Puzzles) and strategy (`parallelbench.STRATEGY`),
each setting (its sampler knobs) is a point: the pooled per-item score over the group's tasks and the mean
tokens-per-step (ParallelBench's axis) over them. At a target speed t a strategy's entry is its best setting whose
tokens-per-step is >= t (none: it cannot go that fast), with a 95% bootstrap interval over the pooled items. Between
two strategies' entries at the same t the items are the same (same tasks, instances and ids), so `dominance.py`'s
paired tests apply: McNemar's exact test where every score is 0/1, else the paired bootstrap, one-sided "row
better", Holm over the pairs of the group and target; `dominates` = tokens-per-step >= the other's and the score
higher with confidence, as the families table decides it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.dominance import ALPHA, compare_paired, holm
from harness.analysis.parallelbench import STRATEGY
from harness.runner.store import read_samples

TARGETS = (0.0, 1.0, 2.0, 4.0)  # 0: the best setting at any speed
GROUPS = {"waiting_line": "Waiting Line", "puzzle": "Puzzles"}


def _interval(scores: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    idx = np.random.default_rng(seed).integers(0, len(scores), size=(resamples, len(scores)))
    lo, hi = np.percentile(scores[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def group_points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (group, strategy, setting): tokens-per-step, pooled score and its items (`rows`, for the tests)."""
    runs = table[table["pb_task"].notna()].copy() if "pb_task" in table else table.iloc[0:0]
    if runs.empty:
        return pd.DataFrame()
    runs["group"] = runs["pb_task"].str.split("/").str[0].map(GROUPS)
    for col in STRATEGY:
        runs[col] = runs[col].fillna("-") if col in runs else "-"
    knobs = [c for c in runs if c.startswith(("sampler.", "model.num_draft")) and runs[c].notna().any()]
    runs["setting"] = ""
    for _, g in runs.groupby(STRATEGY):  # a setting is named by the knobs that vary within its strategy
        moving = [c for c in knobs if g[c].astype(str).nunique() > 1]
        names = g[moving].astype(str).apply(lambda r: " ".join(f"{c.split('.')[-1]}={v}" for c, v in r.items()), axis=1)
        runs.loc[g.index, "setting"] = names if moving else ""
    out = []
    for key, g in runs.groupby(["group", *STRATEGY, "setting"], sort=True):
        rows = [
            {**r, "sample_id": f"{task}:{r['sample_id']}"}
            for task, d in zip(g["pb_task"], g["run_dir"], strict=True)
            for r in read_samples(d)
            if r.get("pb_score") is not None
        ]
        scores = np.array([r["pb_score"] for r in rows], dtype=float)
        point = dict(zip(["group", *STRATEGY, "setting"], key, strict=True))
        point |= {"tasks": g["pb_task"].nunique(), "tps": g["pb_tokens_per_step"].mean(), "rows": rows}
        point |= {"score": scores.mean() if len(scores) else np.nan, "items": int(len(scores))}
        out.append(point)
    return pd.DataFrame(out)


def matched_table(table: pd.DataFrame, targets: tuple[float, ...] = TARGETS) -> pd.DataFrame:
    """Per (group, target tokens-per-step, strategy): the best setting at or above the target, score [95% CI]."""
    points = group_points(table)
    out = []
    if points.empty:
        return pd.DataFrame()
    for (group, target), (key, g) in (
        ((grp, t), item) for grp, gp in points.groupby("group") for t in targets for item in gp.groupby(STRATEGY)
    ):
        fast = g[g["tps"] >= target]
        row = {"group": group, "target_tps": target, **dict(zip(STRATEGY, key, strict=True))}
        if fast.empty:
            out.append({**row, "score": np.nan})
            continue
        best = fast.sort_values(["score", "tps"], ascending=False).iloc[0]
        lo, hi = _interval(np.array([r["pb_score"] for r in best["rows"]], dtype=float))
        row |= {k: best[k] for k in ("setting", "tps", "score", "items", "tasks", "rows")}
        out.append({**row, "score_lo": lo, "score_hi": hi})
    return pd.DataFrame(out)


def matched_dominance(matched: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Every ordered pair of strategies with an entry at the same (group, target): the paired test, Holm-adjusted."""
    out = []
    have = matched[matched["score"].notna()] if "score" in matched else matched
    for (group, target), g in have.groupby(["group", "target_tps"], sort=True):
        pairs = [(a, b) for a in g.index for b in g.index if a != b]
        tests = [compare_paired(g.at[a, "rows"], g.at[b, "rows"], score="pb_score") for a, b in pairs]
        adjusted = holm([t.p_value for t in tests]) if tests else []
        for (a, b), t, p in zip(pairs, tests, adjusted, strict=True):
            faster = g.at[a, "tps"] >= g.at[b, "tps"]
            row = {"group": group, "target_tps": target, "strategy": _name(g.loc[a]), "vs": _name(g.loc[b])}
            row |= {"score_delta": t.quality_delta, "p_adjusted": float(p), "dominates": bool(faster and p < alpha)}
            out.append(row)
    return pd.DataFrame(out)


def _name(row: pd.Series) -> str:
    return " / ".join(str(row[c]) for c in STRATEGY if row[c] != "-")


def format_matched(table: pd.DataFrame, targets: tuple[float, ...] = TARGETS) -> str:
    """The matched table and the dominance lines as markdown ('' without ParallelBench runs)."""
    matched = matched_table(table, targets)
    if matched.empty:
        return ""
    lines = ["| group | tokens/step >= | strategy | setting | tokens/step | score [95% CI] | items |", "|---" * 7 + "|"]
    for _, r in matched.iterrows():
        if pd.isna(r["score"]):
            cells = ["-", "-", "cannot reach", "-"]
        else:
            cells = [
                r["setting"] or "-",
                f"{r['tps']:.2f}",
                f"{r['score']:.2f} [{r['score_lo']:.2f}, {r['score_hi']:.2f}]",
            ]
            cells.append(str(int(r["items"])))
        lines.append(f"| {r['group']} | {r['target_tps']:g} | {_name(r)} | " + " | ".join(cells) + " |")
    dom = matched_dominance(matched)
    wins = dom[dom["dominates"]] if not dom.empty else dom
    lines += ["", "| group | tokens/step >= | strategy | dominates | score delta | p (Holm) |", "|---" * 6 + "|"]
    lines += [
        f"| {d['group']} | {d['target_tps']:g} | {d['strategy']} | {d['vs']} | {d['score_delta']:+.2f} |"
        f" {d['p_adjusted']:.3g} |"
        for _, d in wins.iterrows()
    ] or ["| - | - | none | - | - | - |"]
    return "\n".join(lines)
