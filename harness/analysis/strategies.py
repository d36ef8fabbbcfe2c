"""The field's decoding strategies beside ours (experiment=sudoku_strategies, docs/families.md#the-fields-strategies):
one quality-vs-TPF front per (model, sampler rule) of an eval, where the run table's own fronts
(`harness.analysis.fronts`) have one per model, so a strategy ported from its authors' code and the masked family's
own samplers (and the other families' runs in the same table) rank on one scale.

`strategy_table(table)`: for each eval whose runs include one of `samplers.strategies.STRATEGIES`, one row per
(model, sampler): its runs, its front (tpf:quality points), its best quality and that run's TPF, the best quality
reachable at TPF >= each of `MATCHED_TPF` (with the run's Wilson 95% interval), the area under its front over the
eval's shared TPF range (`front_area`: the mean best quality over [1, the eval's fastest TPF]) and the dLLM
leaderboard's AUP (`aup_d3llm`, y_max the eval's best quality in %). A sampler with several knob settings in the
table (thresholds, step counts) is one front over all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from contract.intervals import wilson_interval
from harness.analysis.aup import aup_d3llm
from harness.analysis.fronts import area_under_front, front_mask
from samplers.strategies import STRATEGIES

MATCHED_TPF = (1.0, 2.0, 4.0, 8.0)
COLUMNS = ["eval", "model", "sampler", "strategy", "runs", "best", "best_tpf", "front_area", "aup_d3llm", "front"]


def strategy_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The scored runs of every eval that has at least one strategy run (empty when none has)."""
    need = {"eval", "model", "sampler", "tpf", "quality"}
    if table.empty or not need <= set(table):
        return table.iloc[0:0]
    df = table[pd.to_numeric(table["tpf"], errors="coerce").gt(0) & table["quality"].notna()]
    evals = set(df.loc[df["sampler"].isin(list(STRATEGIES)), "eval"])
    return df[df["eval"].isin(evals)].copy()


def _best_at(g: pd.DataFrame, tpf: float) -> dict[str, Any]:
    """The best quality of the runs with TPF >= `tpf`, its interval over the run's samples, and that run's TPF."""
    fast = g[g["tpf"] >= tpf]
    if fast.empty:
        return {f"q@{tpf:g}": np.nan, f"q@{tpf:g}_ci": "", f"tpf@{tpf:g}": np.nan}
    r = fast.sort_values(["quality", "tpf"], ascending=False).iloc[0]
    lo, hi = wilson_interval(float(r["quality"]), float(r.get("num_samples", np.nan)))
    ci = f"[{lo:.3f}, {hi:.3f}]" if not np.isnan(lo) else ""
    return {f"q@{tpf:g}": float(r["quality"]), f"q@{tpf:g}_ci": ci, f"tpf@{tpf:g}": float(r["tpf"])}


def strategy_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (eval, model, sampler) of the evals with strategy runs (module docstring), best AUP first."""
    df = strategy_runs(table)
    rows: list[dict[str, Any]] = []
    for ev, on_eval in df.groupby("eval", sort=True):
        hi, y_max = float(on_eval["tpf"].max()), 100 * float(on_eval["quality"].max())
        for (model, sampler), g in on_eval.groupby(["model", "sampler"], sort=True):
            f = g[front_mask(g["tpf"], g["quality"])].sort_values("tpf")
            best = g.sort_values(["quality", "tpf"], ascending=False).iloc[0]
            row = {
                "eval": ev,
                "model": model,
                "sampler": sampler,
                "strategy": sampler in STRATEGIES,
                "runs": len(g),
                "best": float(best["quality"]),
                "best_tpf": float(best["tpf"]),
                "front_area": area_under_front(g["tpf"], g["quality"], 1.0, hi) if hi > 1.0 else np.nan,
                "aup_d3llm": aup_d3llm(f["tpf"], 100 * f["quality"], y_max),
                "front": " | ".join(f"{t:.3g}:{q:.3g}" for t, q in zip(f["tpf"], f["quality"])),
            }
            for t in MATCHED_TPF:
                row |= _best_at(g, t)
            rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return pd.DataFrame(columns=COLUMNS)
    return out.sort_values(["eval", "aup_d3llm"], ascending=[True, False], ignore_index=True)


def format_strategies(table: pd.DataFrame) -> str:
    """The strategy table as text ('' when the table has no strategy run)."""
    st = strategy_table(table)
    if st.empty:
        return ""
    cols = ["eval", "model", "sampler", "strategy", "runs", "best", "best_tpf", "front_area", "aup_d3llm"]
    cols += [c for t in MATCHED_TPF for c in (f"q@{t:g}", f"tpf@{t:g}")]
    return st[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")
