"""Does a sampler setting beat the checkpoint's default, or is the gain noise? A paired test on the same items.

Every run of a (model, eval) group is compared with that group's reference run: by default the run whose sampler
knobs all equal the checkpoint's defaults (`samplers.config.EntropyBoundConfig()`: b=0.1, 48 steps, ...), or one
named by its run name. Both runs decoded the same items (same eval identity), so quality is compared item by item:

- per-item correct/incorrect (every score 0 or 1): McNemar's exact test, i.e. a binomial test on the discordant
  items (run right and reference wrong vs the reverse), one-sided for "the run is better";
- graded scores: a paired bootstrap of the mean per-item difference, one-sided p = share of resamples <= 0.

A run `dominates_default` when its TPF >= the reference's (TPF is an exact count over the same items, no test
needed) and its quality is higher with confidence: p (Holm-adjusted over the runs compared in the group, unless
`correction="none"`) below `alpha` (default 0.05). So "quality >= and TPF >= with one strictly better" is decided
by the quality gain, the one figure that can be noise. A faster run at the same observed quality is not flagged:
that its quality is not lower cannot be shown without a margin; its `quality_delta` and `p_value` are still listed.
That case has its own verdict with a stated margin: `faster_not_worse` when both hold with confidence, each
Holm-adjusted like the other p over the group's runs (an intersection-union test: no further correction):
- faster: TPF above the reference's on the same items (`p_faster`: a one-sided paired bootstrap over items, the
  ratio of sums, total valid tokens / total forwards, recomputed for both runs on each resample; p = share of
  resamples where the run's TPF <= the reference's). TPF is heavy-tailed (a canvas at the step cap costs as much as
  several ordinary ones), so a TPF gain carried by a few items is not taken as a speed-up;
- not worse: quality not lower by `margin` or more (default 0.02, i.e. 2 points): a one-sided paired bootstrap of
  the mean per-item difference (`p_not_worse` = share of resamples <= -margin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from harness.analysis import series
from harness.runner.store import read_samples
from samplers.config import VERIFY_KNOBS, EntropyBoundConfig, SamplerConfig
from samplers.knobs import NOT_KNOBS

ALPHA = 0.05
MISSING = object()
# knobs added after runs were already stored: a run table without their column means the run used the default
NEWER = (*VERIFY_KNOBS, "stream_after_stable")
MARGIN = 0.02  # non-inferiority margin for `faster_not_worse`, in quality units (2 points on a 0..1 scale)
SCORE = "correct"  # the per-sample score whose mean is `quality`
BOOTSTRAP_RESAMPLES = 10_000
COLUMNS = [
    "dominates_default",
    "quality_delta",
    "p_value",
    "p_value_adjusted",
    "dominance_test",
    "dominance_items",
    "dominance_alpha",
    "dominance_correction",
    "reference_run",
    "faster_not_worse",
    "p_not_worse",
    "not_worse_margin",
    "p_faster",
]


@dataclass(frozen=True)
class PairedComparison:
    """A run vs the reference on the items both decoded: mean score difference and one-sided p (run better)."""

    n_items: int
    quality_delta: float
    p_value: float
    test: str  # mcnemar_exact | paired_bootstrap
    p_not_worse: float = float("nan")  # one-sided p for "not lower by `margin` or more" (paired bootstrap)
    p_faster: float = float("nan")  # one-sided p for "higher TPF on these items" (paired bootstrap of the ratio)


def mcnemar_exact(run: np.ndarray, ref: np.ndarray) -> float:
    """One-sided exact McNemar p for "run better than ref" on paired 0/1 outcomes: among the discordant items,
    is "run right, ref wrong" more frequent than a fair coin would make it? 1.0 when no item differs."""
    gain = int(((run == 1) & (ref == 0)).sum())
    loss = int(((run == 0) & (ref == 1)).sum())
    if gain + loss == 0:
        return 1.0
    return float(binomtest(gain, gain + loss, 0.5, alternative="greater").pvalue)


def _item_resamples(items: int, resamples: int, seed: int):
    """Seeded resamples of item indices with replacement, in chunks of at most 1000 (memory: 1000 x items)."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, 1000):
        yield rng.integers(0, items, size=(min(1000, resamples - start), items))


def paired_bootstrap(
    run: np.ndarray, ref: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, below: float = 0.0
) -> float:
    """One-sided paired-bootstrap p for "run better than ref by more than `below`" on per-item scores: the share
    (with the +1 correction) of item resamples whose mean difference is <= `below` (0: better; -margin: not worse
    by the margin). Seeded, so a table is reproducible."""
    d = np.asarray(run, dtype=float) - np.asarray(ref, dtype=float)
    not_better = sum(int((d[idx].mean(axis=1) <= below).sum()) for idx in _item_resamples(len(d), resamples, seed))
    return (1 + not_better) / (1 + resamples)


def paired_tpf_bootstrap(
    run: np.ndarray, ref: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> float:
    """One-sided paired-bootstrap p for "the run's TPF is higher": `run` and `ref` are (items, 2) arrays of
    (valid tokens, forwards) per item, in the same item order; on each resample of items both TPFs are recomputed
    as ratios of sums; p = share (with the +1 correction) of resamples where the run's TPF <= the reference's."""
    run, ref = np.asarray(run, dtype=float), np.asarray(ref, dtype=float)
    not_faster = 0
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of zero-forward items: no TPF, not faster
        for idx in _item_resamples(len(run), resamples, seed):
            a, b = run[idx].sum(axis=1), ref[idx].sum(axis=1)  # (resamples, 2): tokens, forwards
            not_faster += int((~(a[:, 0] / a[:, 1] > b[:, 0] / b[:, 1])).sum())
    return (1 + not_faster) / (1 + resamples)


def compare_paired(
    run_rows: Iterable[dict], ref_rows: Iterable[dict], score: str = SCORE, margin: float = MARGIN
) -> PairedComparison:
    """Pair samples by id (and item hash, where stored) and test the run against the reference on them."""
    ref = {r["sample_id"]: r for r in ref_rows if r.get(score) is not None}
    pairs, costs = [], []
    for r in run_rows:
        other = ref.get(r["sample_id"])
        if other is None or r.get(score) is None:
            continue
        if r.get("item_sha") and other.get("item_sha") and r["item_sha"] != other["item_sha"]:
            raise ValueError(f"sample {r['sample_id']}: the two runs decoded different items (item_sha differs)")
        pairs.append((float(r[score]), float(other[score])))
        costs.append(((r.get("num_tokens"), r.get("nfe")), (other.get("num_tokens"), other.get("nfe"))))
    if not pairs:
        raise ValueError(f"no items with a {score!r} score in both runs")
    a, b = (np.array(x) for x in zip(*pairs))
    run_cost, ref_cost = (np.array(x, dtype=float) for x in zip(*costs))  # None (not recorded) -> NaN
    binary = bool(np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all())
    p = mcnemar_exact(a, b) if binary else paired_bootstrap(a, b)
    return PairedComparison(
        len(pairs),
        float(a.mean() - b.mean()),
        p,
        "mcnemar_exact" if binary else "paired_bootstrap",
        paired_bootstrap(a, b, below=-margin),
        paired_tpf_bootstrap(run_cost, ref_cost)
        if np.isfinite(run_cost).all() and np.isfinite(ref_cost).all()
        else np.nan,
    )


def holm(p_values: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjustment (family-wise error over the comparisons); NaN stays NaN."""
    p = np.asarray(list(p_values), dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[i]))
        out[i] = running
    return out


def default_knobs() -> dict[str, Any]:
    """The checkpoint's reference sampler: its name and every knob that changes a decode, at its default."""
    return {k: v for k, v in asdict(EntropyBoundConfig()).items() if k == "name" or k not in NOT_KNOBS}


def masked_default_knobs() -> dict[str, Any]:
    """The masked family's default: `block_refinement` at diffusers' BlockRefinementScheduler defaults
    (`samplers.masked.MaskedSamplerConfig()`: threshold 0.95, 32 steps per block, greedy, no editing)."""
    from samplers.masked import MaskedSamplerConfig

    return {k: v for k, v in asdict(MaskedSamplerConfig()).items() if k == "name" or k not in NOT_KNOBS}


def family_default_knobs(runs: pd.DataFrame) -> dict[str, Any]:
    """The default sampler of one model's runs: the masked family's (`masked_default_knobs`) when they are masked
    runs, else the uniform-state checkpoint's (`default_knobs`). The star of the figures marks the same run."""
    masked = "label" in runs and len(runs) and runs["label"].map(series.is_masked).all()
    return masked_default_knobs() if masked else default_knobs()


def _same(a: Any, b: Any) -> bool:
    if a is None or (isinstance(a, float) and np.isnan(a)):
        return b is None or (isinstance(b, float) and np.isnan(b))
    try:
        return bool(a == b) or float(a) == float(b)
    except (TypeError, ValueError):
        return False


def matches_knobs(row: Mapping[str, Any], knobs: Mapping[str, Any], ignore: Iterable[str] = ()) -> bool:
    """Does a table row (`sampler` name + `sampler.<knob>` columns) have these knob values (except `ignore`)?"""
    skip = set(ignore)
    if "name" not in skip and row.get("sampler") != knobs.get("name"):
        return False
    defaults = asdict(SamplerConfig())  # a run recorded before a knob existed ran with its default

    def value(k: str) -> Any:
        v = row.get(f"sampler.{k}", MISSING)
        return defaults.get(k) if v is MISSING or (isinstance(v, float) and np.isnan(v) and k in NEWER) else v

    return all(_same(value(k), v) for k, v in knobs.items() if k != "name" and k not in skip)


def _check_dominance_args(alpha: float, correction: str, margin: float) -> None:
    """Bad arguments fail before any run's samples are read, naming the argument."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    if correction not in ("holm", "none"):
        raise ValueError(f"correction: must be 'holm' or 'none', got {correction!r}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin: must be in [0, 1), got {margin}")


def add_dominance(
    table: pd.DataFrame,
    alpha: float = ALPHA,
    reference_run: str | None = None,
    reference_knobs: Mapping[str, Any] | None = None,
    correction: str = "holm",
    score: str = SCORE,
    margin: float = MARGIN,
) -> pd.DataFrame:
    """In place (and returned): the `COLUMNS` for every run, judged against its (model, eval) group's reference.

    The reference is the run named `reference_run`, else the first run whose knobs equal `reference_knobs`
    (default: the family's default sampler, `family_default_knobs`: the checkpoint's for uniform-state runs,
    block refinement's for masked ones). Groups without one get no verdict (NaN, False)."""
    _check_dominance_args(alpha, correction, margin)
    table["dominates_default"] = False
    table["faster_not_worse"] = False
    table["not_worse_margin"] = margin
    for c in ("quality_delta", "p_value", "p_value_adjusted", "dominance_items", "p_not_worse", "p_faster"):
        table[c] = np.nan
    for c in ("dominance_test", "reference_run"):
        table[c] = None
    table["dominance_alpha"] = alpha
    table["dominance_correction"] = correction
    if table.empty or "run_dir" not in table:
        return table
    samples: dict[str, list[dict]] = {}

    def rows_of(run_dir: str) -> list[dict]:
        if run_dir not in samples:
            samples[run_dir] = read_samples(run_dir)
        return samples[run_dir]

    for _, g in table.groupby(["model", "eval"], dropna=False, sort=False):
        if reference_run is not None:
            refs = g.index[g["run_name"] == reference_run]
        else:
            knobs = dict(reference_knobs or family_default_knobs(g))
            refs = [i for i in g.index if matches_knobs(table.loc[i], knobs)]
        if len(refs) == 0:
            continue
        ref = refs[0]
        table.loc[g.index, "reference_run"] = table.at[ref, "run_name"]
        tested = []
        for i in g.index:
            if i == ref:
                continue
            try:
                c = compare_paired(rows_of(table.at[i, "run_dir"]), rows_of(table.at[ref, "run_dir"]), score, margin)
            except ValueError as e:
                print(f"[dominance] {table.at[i, 'run_name']}: no verdict ({e})")
                continue
            table.loc[i, ["quality_delta", "p_value", "dominance_items", "p_not_worse", "p_faster"]] = [
                c.quality_delta,
                c.p_value,
                c.n_items,
                c.p_not_worse,
                c.p_faster,
            ]
            table.at[i, "dominance_test"] = c.test
            tested.append(i)
        if not tested:
            continue
        p = table.loc[tested, "p_value"].to_numpy(dtype=float)
        table.loc[tested, "p_value_adjusted"] = holm(p) if correction == "holm" else p
        faster = table.loc[tested, "tpf"].to_numpy(dtype=float) >= float(table.at[ref, "tpf"])
        better = (table.loc[tested, "quality_delta"].to_numpy(dtype=float) > 0) & (
            table.loc[tested, "p_value_adjusted"].to_numpy(dtype=float) < alpha
        )
        table.loc[tested, "dominates_default"] = faster & better
        p_nw, p_fast = (table.loc[tested, c].to_numpy(dtype=float) for c in ("p_not_worse", "p_faster"))
        p_nw, p_fast = (holm(p) if correction == "holm" else p for p in (p_nw, p_fast))
        table.loc[tested, "p_not_worse"] = p_nw
        table.loc[tested, "p_faster"] = p_fast
        table.loc[tested, "faster_not_worse"] = (p_fast < alpha) & (p_nw < alpha)
    table["dominates_default"] = table["dominates_default"].astype(bool)
    table["faster_not_worse"] = table["faster_not_worse"].astype(bool)
    return table


def describe(table: pd.DataFrame) -> str:
    """The verdict in words, per (model, eval) with a reference: which settings dominate it with confidence."""
    if "reference_run" not in table or table["reference_run"].isna().all():
        return "No run with its family's default sampler knobs here: no dominance verdict."
    lines = []
    for (model, ev), g in table[table["reference_run"].notna()].groupby(["model", "eval"], sort=True):
        ref = g[g["run_name"] == g["reference_run"].iloc[0]].iloc[0]
        tested = g[g["p_value"].notna()]
        tests = ", ".join(sorted(set(tested["dominance_test"].dropna()))) or "none"
        lines.append(
            f"{model} on {ev}: reference {ref['run_name']} (quality {ref['quality']:.4g}, TPF {ref['tpf']:.4g}); "
            f"{len(tested)} settings tested ({tests}, one-sided, correction {g['dominance_correction'].iloc[0]}, "
            f"alpha {g['dominance_alpha'].iloc[0]:g})"
        )
        wins = tested[tested["dominates_default"]]
        if wins.empty:
            best = tested.sort_values(["p_value_adjusted", "p_value"]).head(3)
            lines.append("  no setting dominates the default with confidence; closest:")
            wins = best
        else:
            lines.append(f"  {len(wins)} setting(s) dominate the default with confidence:")
        for _, r in wins.iterrows():
            lines.append(
                f"    {r['run_name']}: quality {r['quality']:.4g} ({r['quality_delta']:+.4g} on "
                f"{int(r['dominance_items'])} items), TPF {r['tpf']:.4g}, p={r['p_value']:.3g} "
                f"(adjusted {r['p_value_adjusted']:.3g})"
            )
        quick = tested[tested["faster_not_worse"]].sort_values("tpf", ascending=False)
        margin = g["not_worse_margin"].iloc[0]
        if quick.empty:
            lines.append(f"  no setting is shown both faster (paired TPF) and to lose less than {margin:g} quality")
        else:
            lines.append(
                f"  {len(quick)} setting(s) are faster and lose less than {margin:g} quality with confidence "
                "(paired bootstraps of TPF and quality, same correction):"
            )
        for _, r in quick.iterrows():
            lines.append(
                f"    {r['run_name']}: TPF {r['tpf']:.4g} vs {ref['tpf']:.4g}, quality {r['quality']:.4g} "
                f"({r['quality_delta']:+.4g}), p={r['p_not_worse']:.3g}, p_faster={r['p_faster']:.3g} (adjusted)"
            )
    return "\n".join(lines)
