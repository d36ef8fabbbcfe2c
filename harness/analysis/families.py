"""Decoding families side by side (experiment=sudoku_families, docs/families.md): masked, uniform-state, AR, AR+draft.

Per family, from the run table (`harness.analysis.aggregate.collect`) and the checkpoint folders the runs loaded:

- `family_table`: one row per (eval, family, step budget): the family's best run at that budget (highest quality,
  then TPF), with its parameters, training steps and CPU time (the checkpoint's `train_log*.csv`: every phase, summed),
  the solved rate and its Wilson 95% interval, blank-cell accuracy, TPF, steps per canvas, re-noised / re-masked
  tokens per forward, committed tokens later changed / repairs / breaks per sample (`evals.corrections`), the
  repetition (stutter) rate, latency p50 and tokens/s. The budget is the sampler's step cap (`max_steps`, or
  `steps_per_block` for masked samplers); AR runs have none.
- `family_dominance`: each family's best run against every other family's best run on the same items
  (`harness.analysis.dominance.compare_paired`: McNemar's exact test, one-sided "row better"; Holm over the pairs);
  `dominates` when its TPF is >= the other's and its quality is higher with confidence.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from contract.intervals import wilson_interval
from contract.paths import resolve_path
from harness.analysis import series
from harness.analysis.dominance import ALPHA, compare_paired, holm
from harness.runner.store import read_samples

ORDER = series.FAMILIES_ORDER  # masked, uniform-state, AR, AR+draft (harness.analysis.series)
BUDGET_KNOBS = ("sampler.steps_per_block", "sampler.max_steps")  # masked, uniform-state
FIGURES = {  # table column -> run-table column
    "solved": "quality",
    "blank_acc": "blank_accuracy",
    "tpf": "tpf",
    "steps_per_canvas": "mean_steps_per_canvas",
    "renoised_per_step": "renoised_per_step",
    "changed_per_sample": "changed_per_sample",
    "repairs_per_sample": "repairs_per_sample",
    "breaks_per_sample": "breaks_per_sample",
    "repetition_rate": "stutter_rate",
    "latency_p50_s": "latency_p50_s",
    "tokens_per_second": "tokens_per_second",
}


def family_kind(label: Any) -> str | None:
    return series.families_name(label)


def budget_of(row: pd.Series) -> float:
    """The run's step budget (masked: steps per block, uniform-state: max steps); NaN for AR."""
    if series.is_masked(row.get("label")):
        return float(row.get(BUDGET_KNOBS[0], np.nan))
    if series.is_uniform(row.get("label")):
        return float(row.get(BUDGET_KNOBS[1], np.nan))
    return np.nan


@cache
def training_budget(folder: str) -> dict[str, Any]:
    """Parameters (train_config.json), and steps + CPU seconds summed over every `train_log*.csv` (one per phase)."""
    import json

    path = resolve_path(folder)
    out: dict[str, Any] = {"parameters": None, "train_steps": None, "train_cpu_s": None}
    cfg = path / "train_config.json"
    if cfg.exists():
        out["parameters"] = json.loads(cfg.read_text()).get("num_parameters")
    steps, seconds = 0, 0.0
    for log in sorted(path.glob("train_log*.csv")):
        rows = [r for r in csv.DictReader(log.open()) if r.get("step")]
        if rows:
            steps, seconds = steps + int(rows[-1]["step"]), seconds + float(rows[-1]["elapsed_s"])
    if steps:
        out |= {"train_steps": steps, "train_cpu_s": seconds}
    return out


def checkpoint_of(run_dir: str) -> dict[str, Any]:
    """The run's checkpoint budget (its config.yaml's `model.path`; AR + draft: the draft's parameters added)."""
    cfg = Path(run_dir) / "config.yaml"
    if not cfg.exists():
        return {}
    model = OmegaConf.load(cfg).get("model") or {}
    out = dict(training_budget(str(model.get("path")))) if model.get("path") else {}
    if draft := model.get("draft_path"):
        d = training_budget(str(draft))
        if out.get("parameters") and d.get("parameters"):
            out["draft_parameters"] = d["parameters"]
    return out


def _best(g: pd.DataFrame) -> pd.Series:
    return g.sort_values(["quality", "tpf"], ascending=False, kind="stable").iloc[0]


def family_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The table's runs of the known kinds with `family` and `budget` columns; empty when fewer than two kinds."""
    if table.empty or "label" not in table:
        return table.iloc[0:0].assign(family=pd.Series(dtype=object), budget=pd.Series(dtype=float))
    df = table[table["label"].map(family_kind).notna()].copy()
    df["family"] = df["label"].map(family_kind)
    df["budget"] = [budget_of(r) for _, r in df.iterrows()]
    return df if df["family"].nunique() > 1 else df.iloc[0:0]


def family_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (eval, family, budget): the best run there (see the module doc)."""
    df = family_runs(table)
    if df.empty:
        return pd.DataFrame()
    rows = []
    for (ev, fam, budget), g in df.groupby(["eval", "family", "budget"], dropna=False, sort=False):
        r = _best(g)
        lo, hi = wilson_interval(float(r["quality"]), float(r.get("num_samples", np.nan)))
        ck = checkpoint_of(r["run_dir"])
        params = ck.get("parameters")
        row = {"eval": ev, "family": fam, "budget": budget, "run_name": r["run_name"], "parameters": params}
        row |= {"draft_parameters": ck.get("draft_parameters"), "train_steps": ck.get("train_steps")}
        row |= {"train_cpu_min": ck["train_cpu_s"] / 60 if ck.get("train_cpu_s") else None}
        row |= {k: r.get(v) for k, v in FIGURES.items()} | {"solved_lo": lo, "solved_hi": hi}
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_k"] = out["family"].map(ORDER.index)
    return out.sort_values(["eval", "_k", "budget"], na_position="first").drop(columns="_k").reset_index(drop=True)


def family_dominance(table: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Each family's best run vs every other family's best run, paired on the items both decoded (per eval)."""
    df = family_runs(table)
    if df.empty:
        return pd.DataFrame()
    rows = []
    for ev, g in df.groupby("eval", sort=False):
        best = {fam: _best(f) for fam, f in g.groupby("family", sort=False)}
        samples = {fam: read_samples(r["run_dir"]) for fam, r in best.items()}
        for a in sorted(best, key=ORDER.index):
            for b in sorted(best, key=ORDER.index):
                if a == b:
                    continue
                try:
                    c = compare_paired(samples[a], samples[b])
                except ValueError:  # no items scored in both (an eval without a per-item score): nothing to test
                    continue
                ra, rb = best[a], best[b]
                rows.append(
                    {"eval": ev, "family": a, "vs": b, "run": ra["run_name"], "vs_run": rb["run_name"]}
                    | {"quality_delta": c.quality_delta, "p_value": c.p_value, "items": c.n_items}
                    | {"tpf": ra["tpf"], "vs_tpf": rb["tpf"], "p_faster": c.p_faster}
                )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_adjusted"] = holm(out["p_value"])
    out["dominates"] = (out["tpf"] >= out["vs_tpf"]) & (out["p_adjusted"] < alpha)
    return out


CELL_FORMATS = [
    ("blank_acc", ".3f"),
    ("tpf", ".2f"),
    ("steps_per_canvas", ".2f"),
    ("renoised_per_step", ".2f"),
    ("changed_per_sample", ".2f"),
    ("repairs_per_sample", ".2f"),
    ("breaks_per_sample", ".2f"),
    ("repetition_rate", ".3f"),
    ("latency_p50_s", ".3f"),
    ("tokens_per_second", ".0f"),
]


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, spec)


def format_families(table: pd.DataFrame) -> str:
    """The comparison table and the dominance tests as text (markdown tables); '' when the table holds < 2 kinds."""
    ft = family_table(table)
    if ft.empty:
        return ""
    head = (
        "| family | parameters | train steps | train CPU min | budget | best run | solved [95% CI] | blank acc. | TPF |"
        " steps/canvas | re-noised/step | changed/sample | repairs/sample | breaks/sample | repetition | latency p50 s"
        " | tok/s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in ft.iterrows():
        params = _fmt(r["parameters"], ",")
        if pd.notna(r.get("draft_parameters")):
            params += f" + {int(r['draft_parameters']):,} draft"
        solved = f"{r['solved']:.1%} [{_fmt(r['solved_lo'] * 100, '.1f')}, {_fmt(r['solved_hi'] * 100, '.1f')}]"
        cells = [r["family"], params, _fmt(r["train_steps"], ","), _fmt(r["train_cpu_min"], ".0f")]
        cells += [_fmt(r["budget"], ".0f"), f"`{r['run_name']}`", solved]
        cells += [_fmt(r[k], spec) for k, spec in CELL_FORMATS]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    dom = family_dominance(table)
    if not dom.empty:
        lines += [
            "",
            "| best of | vs best of | solved delta | p (one-sided, Holm) | TPF | vs TPF | dominates |",
            "|---" * 7 + "|",
        ]
        for _, d in dom.iterrows():
            lines.append(
                f"| {d['family']} | {d['vs']} | {d['quality_delta']:+.3f} | {d['p_adjusted']:.3g} | {d['tpf']:.2f} |"
                f" {d['vs_tpf']:.2f} | {'yes' if d['dominates'] else 'no'} |"
            )
    return "\n".join(lines)
