"""Collect run directories into one table: one row per run, ready for plots, papers and W&B.

A run dir is any folder holding `metrics.json` (written last, atomically, so its presence means the run
finished); folders with `samples.jsonl` but no `metrics.json` are reported as incomplete, never mixed in.
A `metrics.json` that cannot be read (truncated by a copy, garbled) is listed as broken, file named, and
skipped: the other runs are still aggregated (the table's `attrs["broken"]` holds `(run dir, why)` pairs).
Unreadable `samples.jsonl` lines are skipped and counted in `samples_bad_lines`.
Each row carries the run identity (label, model, eval, seed, sampler knobs as `sampler.<knob>` columns; `eval` is
the eval identity `<name>-n<items>-<item hash>`, so runs on other item sets are grouped apart),
every scalar metric (nested dicts flattened as `key.sub`), steps-per-canvas statistics read back from
`samples.jsonl`, and a `consistent` flag: the stored samples re-counted with `decode_metrics` agree with
`metrics.json` (same sample count, tokens and forwards), so a stale or mixed-up run cannot pass unseen.

CLI: `python -m harness.analysis.aggregate PATH... --out outputs/summary [--tpf-range LO HI]`
writes `summary.csv`, `summary.parquet` (runs, with Pareto-front columns) and `fronts.csv`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from contract.records import decode_metrics, interval_figures
from evals.diagnostics import run_diagnostics
from harness.analysis import series
from harness.analysis.dominance import add_dominance, default_knobs, describe, matches_knobs
from harness.analysis.environments import card_columns, format_environments, label_environments
from harness.analysis.families import format_families
from harness.analysis.fronts import annotate_fronts
from harness.analysis.hybrid import format_hybrid, hybrid_table
from harness.analysis.lengths import format_lengths, length_crossovers, length_series
from harness.analysis.parallelbench import pbx_table, per_task_scores, task_pbx_table
from harness.analysis.parallelbench_matched import format_matched
from harness.analysis.scaling import crossovers, format_latency, format_scaling, scaling_series
from harness.analysis.strategies import format_strategies, strategy_table
from harness.runner.store import METRICS, SAMPLES, UnreadableFile, read_metrics, scan_run

ID_COLUMNS = ["run_name", "label", "model", "eval", "sampler", "seed"]
# The failure-mode figures (evals.diagnostics) shown beside quality and TPF; `length_ratio_vs_ar` is filled in
# here, per eval, where the table holds an AR run on the same items.
DIAGNOSTIC_COLUMNS = [
    "format_ok_rate",
    "stutter_rate",
    "mean_output_tokens",
    "length_ratio_vs_ar",
    "unclosed_thought_rate",
]
SAMPLER_PREFIX = "sampler."
REPORT_PREFIX = "report_"  # report_<metric>: the published value beside the measured <metric>
INTERVAL_COLUMNS = ["tpf_lo", "tpf_hi", "tokens_per_second_lo", "tokens_per_second_hi"]  # contract.intervals
NUMERIC_COLUMNS = [
    "quality",
    "tpf",
    "tokens_per_second",
    *INTERVAL_COLUMNS,
    "nfe",
    "num_tokens",
    "num_samples",
    "wall_time_s",
    "mean_steps_per_canvas",
    "step_cap_hit_rate",
    *DIAGNOSTIC_COLUMNS,
]
# What `format_table` prints by default: identity, then the varying sampler knobs, then the headline numbers.
TABLE_ID_COLUMNS = ["run_name", "label", "model", "eval", "sampler"]
TABLE_WIDTH = 160  # characters per printed block of columns
TABLE_FIGURE_COLUMNS = [
    "quality",
    "tpf",
    "tpf_lo",
    "tpf_hi",
    "step_cap_hit_rate",
    "tokens_per_second",
    "tokens_per_second_lo",
    "tokens_per_second_hi",
    "nfe",
    "mean_steps_per_canvas",
    *DIAGNOSTIC_COLUMNS,
    "on_front",
    "dominates_default",
    "quality_delta",
    "p_value",
    "faster_not_worse",
    "consistent",
    # what batching cost this run (harness.runner.batch_check: a subset re-decoded at batch 1; report presets)
    "batch_check.token_agreement",
    "batch_check.quality_delta",
]
# The test-time-scaling view: the default sampler at each step cap (`steps_curve`, steps_curve.csv).
STEPS_CURVE_COLUMNS = ["model", "eval", "max_steps", "quality", "tpf", "mean_steps_per_canvas", "step_cap_hit_rate"]


@dataclass
class RunDirs:
    complete: list[Path]  # hold metrics.json
    incomplete: list[Path]  # samples.jsonl without metrics.json: crashed or still running


def find_run_dirs(paths: Iterable[str | Path]) -> RunDirs:
    """Run dirs under each path (a run dir itself, a sweep folder, or any tree), deduplicated, sorted."""
    complete: set[Path] = set()
    incomplete: set[Path] = set()
    paths = [Path(p) for p in paths]
    if paths and not any(p.exists() for p in paths):
        raise FileNotFoundError(f"none of these paths exist: {', '.join(map(str, paths))}")
    for p in paths:
        if not p.exists():
            print(f"[aggregate] no such path, skipped: {p}")
            continue
        for m in [p / METRICS] if (p / METRICS).is_file() else p.rglob(METRICS):
            complete.add(m.parent.resolve())
        for s in [p / SAMPLES] if (p / SAMPLES).is_file() else p.rglob(SAMPLES):
            incomplete.add(s.parent.resolve())
    return RunDirs(sorted(complete), sorted(incomplete - complete))


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> `a.b` keys; lists are kept only when short and scalar (else dropped from the table)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, list | tuple):
            if len(v) <= 8 and all(isinstance(x, int | float | str | bool) for x in v):
                out[key] = json.dumps(list(v))
        else:
            out[key] = v
    return out


def steps_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Distribution of denoising steps per canvas over all samples (empty for AR runs)."""
    steps = sorted(s for r in rows for s in r.get("steps_per_canvas") or [])
    if not steps:
        return {"num_canvases": 0, "step_cap_hits": 0}
    q = pd.Series(steps, dtype=float)
    return {
        "num_canvases": len(steps),
        "steps_min": int(steps[0]),
        "steps_p50": float(q.quantile(0.5)),
        "steps_p90": float(q.quantile(0.9)),
        "steps_max": int(steps[-1]),
        "step_cap_hits": int(sum(r.get("step_cap_hits", 0) for r in rows)),
    }


def _consistent(metrics: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    recount = decode_metrics(rows)
    return all(
        metrics.get(k) is not None and math.isclose(float(metrics[k]), float(recount[k]), rel_tol=1e-9, abs_tol=1e-9)
        for k in ("num_samples", "num_tokens", "nfe")
    )


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """One table row for one finished run dir."""
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    run = metrics.get("run") or {}
    sampler = run.get("sampler") or {}
    scan = scan_run(run_dir)
    rows = list(scan.rows.values())
    if scan.bad:
        print(f"[aggregate] {run_dir / SAMPLES}: skipped {len(scan.bad)} unreadable line(s) ({scan.describe_bad()})")
    row: dict[str, Any] = {
        "run_name": run.get("run_name", run_dir.name),
        "label": run.get("label"),
        "model": run.get("model"),
        # the eval identity (name, item count, item hash): runs on other items never share a front
        "eval": run.get("eval_id") or run.get("eval"),
        "eval_name": run.get("eval"),
        "sampler": sampler.get("name") or run.get("label"),
        "seed": run.get("seed"),
    }
    row.update({f"{SAMPLER_PREFIX}{k}": v for k, v in flatten(sampler).items() if k != "name"})
    row.update(flatten({k: v for k, v in metrics.items() if k != "run"}))
    row.update({f"decoder.{k}": v for k, v in flatten(run.get("decoder") or {}).items() if "." not in k})
    if report := run.get("report"):  # what the published figure says (experiment=report_* presets)
        row["report"] = " / ".join(str(x) for x in (report.get("figure"), report.get("where")) if x)
        row.update({f"{REPORT_PREFIX}{k}": v for k, v in (report.get("values") or {}).items()})
    row.update(steps_stats(rows))
    if any(row.get(k) is None for k in INTERVAL_COLUMNS):  # stored before the intervals: from samples.jsonl
        row.update({k: v for k, v in interval_figures(rows).items() if row.get(k) is None})
    row["samples_rows"] = len(rows)
    row["samples_bad_lines"] = len(scan.bad)
    row["consistent"] = _consistent(metrics, rows)
    row.update(card_columns(run_dir))  # where it decoded (run_card.json): runs from other environments are kept apart
    row["run_dir"] = str(run_dir)
    return row


def collect(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The run table for every finished run under `paths` (sorted by eval, model, label, run name)."""
    dirs = find_run_dirs(paths)
    for d in dirs.incomplete:
        print(f"[aggregate] skipping incomplete run (no {METRICS}): {d}")
    loaded, broken = [], []
    for d in dirs.complete:
        try:
            loaded.append(load_run(d))
        except UnreadableFile as e:  # one bad file must not hide every other run
            print(f"[aggregate] skipping broken run ({e}): {d}")
            broken.append((str(d), str(e)))
    df = pd.DataFrame(loaded)
    if df.empty:
        df = pd.DataFrame(columns=ID_COLUMNS + ["quality", "tpf", "tokens_per_second", "run_dir"])
        df.attrs["broken"] = broken
        return df
    for c in NUMERIC_COLUMNS:  # an eval without a score stores quality null: NaN, so it sorts/plots as missing
        if c in df:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    first = [c for c in ID_COLUMNS if c in df] + sorted(c for c in df if c.startswith(SAMPLER_PREFIX))
    df = df[first + [c for c in df if c not in first]]
    label_environments(df)  # more than one environment: `model` names each (harness.analysis.environments)
    df = df.sort_values(["eval", "model", "label", "run_name"], na_position="last", kind="stable")
    df = df.reset_index(drop=True)
    df.attrs["broken"] = broken
    return df


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns mixing value types (e.g. a knob that is a number in one sampler, text in another)
    become text, the one representation parquet accepts for them; the CSV keeps the raw values."""
    out = df.copy()
    for c in out.select_dtypes(include="object").columns:
        kinds = {type(v) for v in out[c] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1:
            out[c] = [None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in out[c]]
    return out


def write_table(df: pd.DataFrame, out_dir: str | Path, stem: str = "summary") -> list[Path]:
    """`<stem>.csv` and `<stem>.parquet` under `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, parquet = out_dir / f"{stem}.csv", out_dir / f"{stem}.parquet"
    df.to_csv(csv, index=False)
    _parquet_safe(df).to_parquet(parquet, index=False)
    return [csv, parquet]


def summarize(
    paths: Iterable[str | Path], out_dir: str | Path, tpf_range: tuple[float, float] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """Collect, mark Pareto fronts and their areas (front_area, aup_d3llm), write summary.{csv,parquet}, fronts.csv."""
    runs = collect(paths)
    table, fronts = annotate_fronts(runs, tpf_range=tpf_range)
    add_diagnostics(table)
    add_dominance(table)  # dominates_default, quality_delta, p_value: paired test vs the checkpoint's sampler
    table.attrs["broken"] = runs.attrs.get("broken", [])
    files = write_table(table, out_dir, "summary")
    fronts_csv = Path(out_dir) / "fronts.csv"
    fronts.to_csv(fronts_csv, index=False)
    files.append(fronts_csv)
    if (curve := steps_curve(table))["max_steps"].nunique() > 1:  # a curve needs two step caps at least
        curve.to_csv(Path(out_dir) / "steps_curve.csv", index=False)
        files.append(Path(out_dir) / "steps_curve.csv")
    if not (st := strategy_table(table)).empty:  # the field's strategies: a front per sampler rule
        st.to_csv(Path(out_dir) / "strategies.csv", index=False)
        files.append(Path(out_dir) / "strategies.csv")
    if not (pb := pbx_table(table)).empty:  # ParallelBench runs: PBx per strategy (harness.analysis.parallelbench)
        pb.to_csv(Path(out_dir) / "parallelbench_pbx.csv", index=False)
        task_pbx_table(table).to_csv(Path(out_dir) / "parallelbench_task_pb80.csv", index=False)
        files += [Path(out_dir) / "parallelbench_pbx.csv", Path(out_dir) / "parallelbench_task_pb80.csv"]
    return table, fronts, files


def steps_curve(table: pd.DataFrame) -> pd.DataFrame:
    """Quality and TPF vs `max_steps` for the runs that differ from the checkpoint's sampler in the step cap
    alone (test-time scaling: can more steps than the default 48 buy quality back?), per model and eval."""
    key = f"{SAMPLER_PREFIX}max_steps"
    if table.empty or key not in table:
        return pd.DataFrame(columns=STEPS_CURVE_COLUMNS)
    rows = [i for i in table.index if matches_knobs(table.loc[i], default_knobs(), ignore=["max_steps"])]
    curve = table.loc[rows].rename(columns={key: "max_steps"})
    curve = curve[[c for c in STEPS_CURVE_COLUMNS + ["run_name"] if c in curve]]
    return curve.sort_values(["model", "eval", "max_steps"], kind="stable").reset_index(drop=True)


def add_diagnostics(table: pd.DataFrame) -> pd.DataFrame:
    """In place (and returned): the failure-mode figures of every run, and `length_ratio_vs_ar` per eval.

    Runs stored before diagnostics existed get theirs from `samples.jsonl` (`evals.diagnostics.run_diagnostics`).
    `length_ratio_vs_ar` = a run's mean output tokens / that of the AR runs (label `ar`, averaged when there are
    several) on the same eval identity, i.e. the same items; left empty where the eval has no AR run.
    """
    from harness.runner.store import read_samples

    if table.empty or "run_dir" not in table:
        return table
    missing = table["stutter_rate"].isna() if "stutter_rate" in table else pd.Series(True, index=table.index)
    for i in table.index[missing]:
        try:
            figures = run_diagnostics(read_samples(table.at[i, "run_dir"]))
        except (OSError, ValueError) as e:
            print(f"[aggregate] no diagnostics for {table.at[i, 'run_dir']}: {e}")
            continue
        for k, v in figures.items():
            if k not in table or pd.isna(table.at[i, k]):
                table.loc[i, k] = v
    if "mean_output_tokens" not in table or "label" not in table:
        return table
    lengths = pd.to_numeric(table["mean_output_tokens"], errors="coerce")
    for _, g in table.groupby("eval", sort=False, dropna=False):
        ar = lengths[g.index][g["label"].map(series.is_plain_ar).to_numpy(dtype=bool)].dropna()
        if len(ar) and ar.mean() > 0:
            table.loc[g.index, "length_ratio_vs_ar"] = lengths[g.index] / ar.mean()
    return table


def varying_knobs(df: pd.DataFrame) -> list[str]:
    """Sampler knob columns whose set values differ between these runs (a knob only some samplers have,
    with one value where set, does not vary): the ones worth showing in the table and next to a point."""
    return [c for c in df if c.startswith(SAMPLER_PREFIX) and df[c].dropna().astype(str).nunique() > 1]


def format_table(df: pd.DataFrame, columns: list[str] | None = None, width: int = TABLE_WIDTH) -> str:
    """A readable text table: identity, the varying sampler knobs, and the headline numbers, in blocks of columns
    at most `width` characters wide (a run's row number `#` starts every block), not one line of 600+."""
    if df.empty:
        return "(no finished runs)"
    if columns is None:  # each figure followed by its published value, where a report_* preset gave one
        figures = [x for c in TABLE_FIGURE_COLUMNS for x in (c, f"{REPORT_PREFIX}{c}")]
        columns = TABLE_ID_COLUMNS + varying_knobs(df) + figures + (["report"] if "report" in df else [])
    view = df[[c for c in columns if c in df]].reset_index(drop=True)
    view.insert(0, "#", range(len(view)))

    def render(cols: list[str]) -> str:
        return view[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")

    blocks, block = [], ["#"]
    for c in view.columns[1:]:
        if len(block) > 1 and max(map(len, render([*block, c]).splitlines())) > width:
            blocks.append(block)
            block = ["#"]
        block.append(c)
    return "\n\n".join(render(b) for b in [*blocks, block])


def print_summary(table: pd.DataFrame, fronts: pd.DataFrame) -> None:
    if envs := format_environments(table):
        print("Runs decoded in more than one environment (their run cards), kept apart as `model [environment]`:")
        print(envs + "\n")
    print(format_table(table))
    if not fronts.empty:
        print(
            "\nArea under the quality-vs-TPF front, two ways per model: front_area = mean best quality over TPF "
            "[tpf_min, tpf_max] (ours, quality units);\naup_d3llm = the dLLM leaderboard's AUP of the front "
            "(accuracy % x TPF, weighted; y_max = aup_y_max, the eval's best quality in %); front = tpf:quality points:"
        )
        print(fronts.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    curve = steps_curve(table)
    if curve["max_steps"].nunique() > 1:
        print("\nQuality vs max denoising steps (the checkpoint's sampler otherwise; test-time scaling):")
        print(curve.drop(columns="run_name").to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if "reference_run" in table:
        print("\nDominance over each model's default sampler (its family's; paired test on the same items):")
        print(describe(table))
    if families := format_families(table):
        print("\nDecoding families at equal size (best run per step budget; harness.analysis.families):")
        print(families)
    if strategies := format_strategies(table):
        print("\nThe field's strategies beside our samplers (one front per model and sampler; q@x: best quality at")
        print("TPF >= x; harness.analysis.strategies):")
        print(strategies)
    if hybrid := format_hybrid(hybrid_table(table)):
        print("\nHybrid decoding vs the pure modes of the same weights (paired on items; p: one-sided, run better):")
        print(hybrid)
    if latency := format_latency(table):
        print("\nLatency as users see it (seconds; per-user tokens/s: median and the rate 95% / 99% of users get):")
        print(latency)
    if not (series := scaling_series(table)).empty:
        print("\nThroughput vs concurrency (runs of one model at several batch sizes):")
        print(format_scaling(series, crossovers(series)))
    if not (lengths := length_series(table)).empty:
        print("\nSingle-user speed vs output length (batch 1; where diffusion beats each AR baseline):")
        print(format_lengths(lengths, length_crossovers(lengths)))
    if not (pb := pbx_table(table)).empty:
        print("\nParallelBench (PBx: the highest tokens-per-step with mean task score >= x%; PB* on their")
        print("max_tokens/NFE, PB*_tpf on our TPF; harness.analysis.parallelbench), then each task's score [interval]:")
        print(pb.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print(per_task_scores(table).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print("\nPB80 of each task alone (tokens-per-step at which that task still scores >= 80%; 0: never):")
        print(task_pbx_table(table).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print("\nParallelBench at matched tokens-per-step (per task group; harness.analysis.parallelbench_matched):")
        print(format_matched(table))
    if broken := table.attrs.get("broken"):
        print(f"\n{len(broken)} broken run(s), not in the table:")
        for run_dir, why in broken:
            print(f"  {run_dir}: {why}")


def cli_parser(module: str, doc: str, out: str, out_help: str) -> argparse.ArgumentParser:
    """The arguments `python -m harness.analysis.aggregate` and `python -m harness.pareto` share: the paths to search,
    `--out` and `--tpf-range` (read back as a tuple or None by `tpf_range`); `doc`'s first paragraph describes."""
    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run dirs, sweep dirs, or any folder to search for metrics.json")
    ap.add_argument("--out", default=out, help=out_help)
    ap.add_argument(
        "--tpf-range",
        nargs=2,
        type=float,
        metavar=("LO", "HI"),
        help="TPF range for front_area, the area under the front (default: 1 to the eval's largest TPF)",
    )
    return ap


def tpf_range(args: argparse.Namespace) -> tuple[float, float] | None:
    """`--tpf-range LO HI`, refused unless 0 <= LO < HI (a reversed range would give a front_area of NaN)."""
    if not args.tpf_range:
        return None
    lo, hi = args.tpf_range
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
        raise SystemExit(f"--tpf-range: need finite 0 <= LO < HI, got {lo} {hi}")
    return lo, hi


def main(argv: list[str] | None = None) -> None:
    ap = cli_parser(
        "harness.analysis.aggregate", __doc__, "outputs/summary", "where summary.{csv,parquet}, fronts.csv go"
    )
    args = ap.parse_args(argv)
    table, fronts, files = summarize(args.paths, args.out, tpf_range(args))
    print_summary(table, fronts)
    print("\nwrote " + ", ".join(map(str, files)))


if __name__ == "__main__":
    main()
