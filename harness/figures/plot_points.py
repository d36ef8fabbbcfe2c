"""What each point of a speed/quality figure means, as table columns (pure pandas: the PNG, the interactive HTML
and the W&B charts all read the same columns, so they cannot disagree).

`plot_points(table)` adds, per run:
- `family` / `family_name`: the sampler family (`entropy_bound`, `confidence_topk`, `confidence_threshold`, with
  `+remask` when `remask_ratio > 0`; `diffusers_*` for diffusers' pipeline, `decoder=diffusers`); baselines are
  their decoder kind (`ar`, `ar+mtp`, `ar+draft`). Figures give each family one colour and each decoder kind one
  marker shape.
- `is_default`: the run decodes with its family's default sampler, as `harness.analysis.dominance` decides it: its
  `reference_run` where the table has one, else every decode knob at the default (uniform-state: the checkpoint's
  entropy bound b=0.1, 48 steps, T 0.8->0.4; masked: block refinement at BlockRefinementScheduler's defaults);
  `default_description` says which in legends.
- `quality_lo` / `quality_hi`: the Wilson 95% interval of `quality` over `num_samples` samples. Quality is the
  mean of per-sample `correct` in [0, 1]. For 0/1 scores this is the exact Wilson interval; for graded scores
  (partial credit) it is used as is: a score in [0, 1] with mean p has variance at most p(1-p), so the interval
  is at least as wide as the normal one it stands for (conservative). Quality outside [0, 1] gets no interval.
- `point_label`: the knobs that vary within the run's family (`b=0.03 n=4`), spelled as in run names
  (`samplers.knobs`); a baseline is labelled with its kind (`AR+MTP`).
- `dominates_default`: kept when the table has it (issue #13, `harness.analysis.dominance`), else False.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from contract.decoding import DecoderKind
from contract.intervals import wilson_interval
from harness.analysis import series
from harness.analysis.aggregate import SAMPLER_PREFIX
from harness.analysis.dominance import default_knobs, masked_default_knobs, matches_knobs
from harness.analysis.hybrid import family_of_hybrid
from samplers.knobs import NOT_KNOBS, label_part

# Kinds, their names and what labels their points: harness.analysis.series (the one style table). The hybrid kinds
# (diffusion drafts, the same weights' AR mode verifies: harness.engine.canvas_verify) are families of their own, a
# routed one per rule; every masked (absorbing-state) sampler is one family, one colour (experiment=sudoku_families).
MASKED = str(DecoderKind.MASKED)
FAMILY_NAMES = {
    "entropy_bound": "entropy bound",
    "confidence_topk": "confidence top-k",
    "confidence_threshold": "confidence threshold",
    # decoder=diffusers: diffusers' pipeline and schedulers, families of their own beside ours
    "diffusers_entropy_bound": "entropy bound (diffusers)",
    "diffusers_block_refinement": "block refinement (diffusers)",
    "diffusers_ddim": "DDIM (diffusers)",
    MASKED: "masked (all samplers)",
}
REMASK = "+remask"
# Knobs that choose how a draw is computed, not which tokens the rule keeps: not worth a label (a sweep over
# them is an implementation check, shown in the run table).
IMPLEMENTATION_KNOBS = ("draw", "random_stream", "cache_implementation")
POINT_COLUMNS = [
    "family",
    "family_name",
    "is_default",
    "quality_lo",
    "quality_hi",
    "point_label",
    "dominates_default",
    "faster_not_worse",
]


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def family_of(row: pd.Series | dict[str, Any]) -> str:
    """The family key of a run: its sampler (+remask) for diffusion, its decoder kind for a baseline."""
    label = row.get("label")
    if series.is_routed(label):  # one family per routing rule: `routed (steps)`
        return family_of_hybrid(label, row.get(f"{SAMPLER_PREFIX}verify"))
    if series.is_masked(label):
        return MASKED
    if not series.is_uniform(label):
        return str(label)
    name = str(row.get("sampler") or "diffusion")
    rm = row.get(f"{SAMPLER_PREFIX}remask_ratio")
    return name + REMASK if not _missing(rm) and float(rm) > 0 else name


def family_name(family: str) -> str:
    """`entropy bound + remask`, `confidence top-k`, `AR+MTP`: how a family is named in a legend."""
    if series.is_kind_family(family) or series.is_routed_family(family):
        return series.name(family)
    base, remask = (family[: -len(REMASK)], True) if family.endswith(REMASK) else (family, False)
    name = FAMILY_NAMES.get(base, base.replace("_", " "))
    return f"{name} + remask" if remask else name


def is_default(row: pd.Series | dict[str, Any]) -> bool:
    """The run is the default sampler: the reference run the dominance test compared against (`reference_run`,
    `harness.analysis.dominance`) where the table names one, else a diffusion run whose knobs all equal the checkpoint's
    (`harness.analysis.dominance.default_knobs`: one definition of "the default" for the star and the red ring)."""
    if series.is_masked(row.get("label")):  # the masked family's own default (block refinement at diffusers')
        return matches_knobs(row, masked_default_knobs())
    if not series.is_uniform(row.get("label")):
        return False
    ref = row.get("reference_run")
    if isinstance(ref, str) and ref:
        return row.get("run_name") == ref
    return matches_knobs(row, default_knobs())


def family_knobs(df: pd.DataFrame) -> list[str]:
    """The sampler knob columns whose set values differ between these runs (one family's runs), sorted by name."""
    skip = {f"{SAMPLER_PREFIX}{k}" for k in (*NOT_KNOBS, *IMPLEMENTATION_KNOBS)}
    return sorted(
        c for c in df if c.startswith(SAMPLER_PREFIX) and c not in skip and df[c].dropna().astype(str).nunique() > 1
    )


def point_label(row: pd.Series, knobs: list[str]) -> str:
    """`b=0.03 n=4`: the given knobs of a diffusion (or hybrid) run; a baseline's kind (`AR+MTP`)."""
    if not series.knob_labelled(row["label"]):
        return series.name(row["label"])
    parts = []
    for c in knobs:
        v = row[c]
        if _missing(v):
            continue
        parts.append(label_part(c[len(SAMPLER_PREFIX) :], v))
    if series.is_masked(row["label"]):  # one family, several samplers: the sampler names the point, and a knob is shown
        own = masked_sampler_defaults(str(row.get("sampler")))  # only where it differs from that sampler's default
        parts = [
            label_part(c[len(SAMPLER_PREFIX) :], row[c])
            for c in knobs
            if not _missing(row[c]) and not _same_value(row[c], own.get(c[len(SAMPLER_PREFIX) :], MISSING))
        ]
        parts.insert(0, str(row.get("sampler")))
    return " ".join(parts)


MISSING = object()


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or float(a) == float(b)
    except (TypeError, ValueError):
        return False


def masked_sampler_defaults(name: str) -> dict[str, Any]:
    """A masked sampler's own knob defaults (`samplers.masked`): `cap_at_block=True` is low_confidence's own, so
    a label repeating it says nothing."""
    from dataclasses import asdict

    from samplers.masked import MASKED_SAMPLERS

    return asdict(MASKED_SAMPLERS[name]()) if name in MASKED_SAMPLERS else {}


def default_description(row: pd.Series | dict[str, Any]) -> str:
    """What a starred (default) run decodes with, from its own knobs: `entropy bound b=0.1, 48 steps, T 0.8->0.4`
    for the uniform-state checkpoint's sampler, `block refinement, threshold 0.95, 32 steps per block` for the
    masked family's."""

    def knob(k: str) -> Any:
        return row.get(f"{SAMPLER_PREFIX}{k}")

    name = str(row.get("sampler"))
    if series.is_masked(row.get("label")):
        parts = [name.replace("_", " ")]
        if not _missing(knob("threshold")):
            parts.append(f"threshold {knob('threshold'):g}")
        parts.append(f"{int(knob('steps_per_block'))} steps per block")
        if not _missing(knob("editing_threshold")):
            parts.append(f"editing {knob('editing_threshold'):g}")
        return ", ".join(parts)
    if name == "entropy_bound":
        steps, temps = int(knob("max_steps")), f"T {knob('t_max'):g}->{knob('t_min'):g}"
        return f"entropy bound b={knob('entropy_bound'):g}, {steps} steps, {temps}"
    return FAMILY_NAMES.get(name, name.replace("_", " "))


def plot_points(table: pd.DataFrame) -> pd.DataFrame:
    """A copy of the run table with the columns of `POINT_COLUMNS` (see the module docstring)."""
    df = table.copy()
    if df.empty:
        for c in POINT_COLUMNS:
            df[c] = pd.Series(dtype=object)
        return df
    df["family"] = [family_of(r) for _, r in df.iterrows()]
    df["family_name"] = [family_name(f) for f in df["family"]]
    df["is_default"] = [is_default(r) for _, r in df.iterrows()]
    n = df["num_samples"] if "num_samples" in df else pd.Series(np.nan, index=df.index)
    quality = pd.to_numeric(df["quality"], errors="coerce") if "quality" in df else pd.Series(np.nan, index=df.index)
    bounds = [wilson_interval(q, k) for q, k in zip(quality, n)]
    df["quality_lo"] = [lo for lo, _ in bounds]
    df["quality_hi"] = [hi for _, hi in bounds]
    df["point_label"] = ""
    for _, g in df.groupby(["eval", "family"], sort=False, dropna=False):
        knobs = family_knobs(g)
        for i, r in g.iterrows():
            df.at[i, "point_label"] = point_label(r, knobs)
    for flag in (
        "dominates_default",
        "faster_not_worse",
    ):  # harness.analysis.dominance's verdicts, where the table has them
        if flag in df:
            df[flag] = df[flag].map(lambda v: str(v).lower() == "true")
        else:
            df[flag] = False
    return df


# ---- style shared by the PNG/SVG (matplotlib) and the HTML (plotly) figures ------------------------------------

FAMILY_ORDER = ["entropy_bound", "entropy_bound+remask", "confidence_topk", "confidence_threshold", MASKED]
FAMILY_COLORS = {  # tab10 hues; red is kept for "dominates the default", grey for the baselines
    "entropy_bound": "#1f77b4",
    "entropy_bound+remask": "#9467bd",
    "confidence_topk": "#ff7f0e",
    "confidence_threshold": "#2ca02c",
    str(DecoderKind.SELF_SPECULATIVE): series.STYLES[DecoderKind.SELF_SPECULATIVE].colour,  # hybrid: its own hues
    "routed (steps)": "#e377c2",
    "routed (step_cap)": "#bcbd22",
    MASKED: series.STYLES[DecoderKind.MASKED].colour,
}
SPARE_COLORS = ["#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a"]
BASELINE_COLOR = series.GREY  # every baseline on the fronts (their marker tells them apart)
HIGHLIGHT_COLOR = "#d62728"
NOT_WORSE_COLOR = "#2ca02c"  # faster than the default at no quality loss (within the margin): dashed green ring


def series_order(pts: pd.DataFrame) -> list[tuple[Any, str]]:
    """(model, family) series in legend order: diffusion families in `FAMILY_ORDER`, then baselines by kind."""
    keys = {(m, f) for m, f in zip(pts["model"], pts["family"])}
    kinds = list(series.STYLES)

    def rank(key: tuple[Any, str]) -> tuple[int, int, str, str]:
        model, fam = key
        if series.is_kind_family(fam):
            return (2, kinds.index(series.kind_of(fam)), str(model), fam)
        return (0 if fam in FAMILY_ORDER else 1, FAMILY_ORDER.index(fam) if fam in FAMILY_ORDER else 0, fam, str(model))

    return sorted(keys, key=rank)


def series_colors(pts: pd.DataFrame) -> dict[tuple[Any, str], str]:
    """One colour per family; with several diffusion models on one plot, one colour per (model, family) series."""
    order = series_order(pts)
    diffusion = [k for k in order if not series.is_kind_family(k[1])]
    per_series = len({m for m, _ in diffusion}) > 1
    palette = [*FAMILY_COLORS.values(), *SPARE_COLORS]
    colors: dict[tuple[Any, str], str] = {}
    spare = iter(SPARE_COLORS * 10)
    for i, key in enumerate(diffusion):
        colors[key] = palette[i % len(palette)] if per_series else FAMILY_COLORS.get(key[1]) or next(spare)
    for key in order:
        colors.setdefault(key, BASELINE_COLOR)
    return colors
