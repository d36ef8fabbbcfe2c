"""Hybrid decoding beside the two pure modes of the same weights: what a self-speculative or routed run buys.

A hybrid run (label `self-speculative` or `routed`: `harness.engine.canvas_verify`) is judged against the pure-diffusion
run with the checkpoint's default sampler and against the AR-mode run (`ar-same-weights`) of the same weights (the
same `decoder.path`) on the same eval, paired on items as the dominance test pairs them (`harness.analysis.dominance`):
quality difference and one-sided p for "better", TPF beside both. For greedy verification it also checks the
lossless claim on the stored outputs: the share of samples whose tokens equal the AR-mode run's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import series
from harness.analysis.dominance import compare_paired, default_knobs, matches_knobs
from harness.runner.store import read_samples

COLUMNS = [
    "eval",
    "run_name",
    "family",
    "quality",
    "tpf",
    "mean_accepted_per_verify",
    "verified_canvas_share",
    "delta_vs_diffusion",
    "p_vs_diffusion",
    "tpf_vs_diffusion",
    "delta_vs_ar",
    "p_vs_ar",
    "tpf_vs_ar",
    "same_tokens_as_ar",
]


def family_of_hybrid(label: str, verify: object) -> str:
    """A hybrid run's family on the fronts and in the tables: `self-speculative`, or one per routing rule."""
    return series.routed_family(verify) if series.is_routed(label) else label


def _reference(g: pd.DataFrame, kind) -> pd.Series | None:
    """The run of one kind (`kind(label)`, a `harness.analysis.series` predicate); the uniform-state one at the
    checkpoint's default knobs."""
    runs = g[g["label"].map(kind).astype(bool)]
    if kind is series.is_uniform:
        runs = runs[[matches_knobs(r, default_knobs()) for _, r in runs.iterrows()]]
    return runs.iloc[0] if len(runs) else None


def _same_tokens(run: list[dict], ref: list[dict]) -> float:
    tokens = {r["sample_id"]: r.get("token_ids") for r in ref}
    paired = [r.get("token_ids") == tokens[r["sample_id"]] for r in run if r["sample_id"] in tokens]
    return float(np.mean(paired)) if paired else float("nan")


def hybrid_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per hybrid run that has a pure-diffusion or AR-mode run of the same weights on the same eval."""
    if table.empty or "decoder.path" not in table or not table["label"].map(series.is_hybrid).any():
        return pd.DataFrame(columns=COLUMNS)
    rows: list[dict[str, Any]] = []
    for (ev, _), g in table.groupby(["eval", "decoder.path"], dropna=True, sort=False):
        refs = {"diffusion": _reference(g, series.is_uniform), "ar": _reference(g, series.is_same_weights_ar)}
        if all(r is None for r in refs.values()):
            continue
        for _, run in g[g["label"].map(series.is_hybrid).astype(bool)].iterrows():
            samples = read_samples(run["run_dir"])
            row = {c: run.get(c) for c in ("run_name", "quality", "tpf", "mean_accepted_per_verify")}
            row.update(eval=ev, family=family_of_hybrid(run["label"], run.get("sampler.verify")))
            row["verified_canvas_share"] = run.get("verified_canvas_share")
            for key, ref in refs.items():
                if ref is None:
                    continue
                other = read_samples(ref["run_dir"])
                row[f"tpf_vs_{key}"] = float(ref["tpf"])
                try:
                    c = compare_paired(samples, other)
                    row[f"delta_vs_{key}"], row[f"p_vs_{key}"] = c.quality_delta, c.p_value
                except ValueError as e:  # e.g. no scored item in common: the figures stay empty, the rest holds
                    print(f"[hybrid] {run['run_name']} vs the {key} run: no paired verdict ({e})")
                if ref is refs["ar"]:  # the AR mode's own run: are these its tokens?
                    row["same_tokens_as_ar"] = _same_tokens(samples, other)
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def format_hybrid(hybrid: pd.DataFrame) -> str:
    """The table, and per self-speculative greedy run whether its outputs are the AR mode's."""
    if hybrid.empty:
        return ""
    lines = [hybrid.to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    for _, r in hybrid[hybrid["family"].map(series.is_self_speculative).astype(bool)].iterrows():
        if pd.notna(r["same_tokens_as_ar"]):
            lines.append(
                f"{r['run_name']}: {r['same_tokens_as_ar']:.1%} of samples decode exactly the AR mode's tokens "
                f"(greedy verification is lossless), at TPF {r['tpf']:.3g} vs the AR mode's {r['tpf_vs_ar']:.3g}"
            )
    return "\n".join(lines)
