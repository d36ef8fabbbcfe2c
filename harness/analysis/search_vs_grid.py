"""`make search`: the Sudoku sampler search, then its front against the grid's (`make sweep`), by hypervolume.

    python -m harness.analysis.search_vs_grid [--skip-run] [--search-dir DIR] [--grid-dir DIR] [harness.run
    overrides...]

1. Runs `python -m harness.run experiment=sudoku_search` (multi-objective TPE, 11 runs; resumable: a re-run
   continues its study and reuses finished run dirs), unless `--skip-run`.
2. Prints, for the search and for the grid (`outputs/sweeps/sudoku_sweep`, the 23 diffusion runs of `make sweep`),
   the number of diffusion runs and the hypervolume of their (TPF, quality) front with reference point TPF 1,
   quality 0 (`harness.analysis.fronts.hypervolume`), also clipped to the grid's TPF range (same x range for both), and
   whether the search matched the grid's hypervolume with at most half its runs.
3. Prints the dominance verdicts against the checkpoint's default sampler (paired McNemar test on the same
   200 puzzles, `harness.analysis.dominance`) over the search's and the grid's settings together, and the search's
   quality-vs-steps view. Everything also goes to `outputs/bench/search.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from contract.paths import REPO_ROOT as REPO
from harness.analysis import series
from harness.analysis.aggregate import collect
from harness.analysis.dominance import add_dominance, describe
from harness.analysis.fronts import hypervolume

REF_POINT = (1.0, 0.0)  # (TPF, quality): AR speed, nothing solved


def diffusion_runs(table: pd.DataFrame, eval_id: str | None = None) -> pd.DataFrame:
    """The block-diffusion runs of the table (AR baselines are not sampler settings), on one eval identity."""
    if table.empty:
        return table
    runs = table[table["label"].map(series.is_uniform).astype(bool)]
    return runs[runs["eval"] == eval_id] if eval_id is not None else runs


def front_figures(runs: pd.DataFrame, tpf_max: float | None = None) -> dict[str, Any]:
    return {
        "runs": int(len(runs)),
        "hypervolume": hypervolume(runs["tpf"], runs["quality"], REF_POINT),
        "hypervolume_in_grid_range": hypervolume(runs["tpf"], runs["quality"], REF_POINT, tpf_max=tpf_max)
        if tpf_max is not None
        else None,
        "max_tpf": float(runs["tpf"].max()) if len(runs) else None,
    }


def compare(search_dir: Path, grid_dir: Path) -> dict[str, Any]:
    """Search vs grid figures (see the module docstring); the grid part is None when `grid_dir` holds no runs."""
    search = collect([search_dir])
    found = diffusion_runs(search)
    if found.empty:
        raise SystemExit(f"no finished diffusion runs under {search_dir}: run the search first")
    eval_id = str(found["eval"].iloc[0])
    found = diffusion_runs(search, eval_id)
    grid = diffusion_runs(collect([grid_dir]), eval_id) if grid_dir.exists() else pd.DataFrame()
    out: dict[str, Any] = {"eval": eval_id, "reference_point": {"tpf": REF_POINT[0], "quality": REF_POINT[1]}}
    grid_tpf = float(grid["tpf"].max()) if len(grid) else None
    out["search"] = front_figures(found, grid_tpf)
    out["grid"] = front_figures(grid, grid_tpf) if len(grid) else None
    if out["grid"]:
        out["search_matches_grid"] = bool(
            out["search"]["hypervolume"] >= out["grid"]["hypervolume"]
            and out["search"]["runs"] <= out["grid"]["runs"] / 2  # at most half: 11 of 23
        )
    both = pd.concat([grid, found], ignore_index=True) if len(grid) else found.copy()
    both = add_dominance(both.drop_duplicates("run_name").reset_index(drop=True))  # a config in both: once
    out["dominance"] = describe(both)
    wins = both[both["dominates_default"]]
    out["dominating_settings"] = wins["run_name"].tolist()
    cols = ["run_name", "quality", "tpf", "quality_delta", "p_value", "p_value_adjusted", "dominates_default"]
    out["search_runs"] = found.sort_values("tpf")[cols[:3]].to_dict("records")
    return out


def report(fig: dict[str, Any]) -> str:
    s, g = fig["search"], fig["grid"]
    lines = [f"Sudoku sampler search vs grid on {fig['eval']} (hypervolume: reference point TPF 1, quality 0)"]
    lines.append(
        f"  search: {s['runs']:3d} diffusion runs, hypervolume {s['hypervolume']:.4f} (max TPF {s['max_tpf']:.3g})"
    )
    if g is None:
        lines.append("  grid:   none found; run `make sweep` (23 diffusion runs + 2 AR, ~2 min on 2 cores) to compare")
    else:
        lines.append(
            f"  grid:   {g['runs']:3d} diffusion runs, hypervolume {g['hypervolume']:.4f} (max TPF {g['max_tpf']:.3g})"
        )
        lines.append(
            f"  within the grid's TPF range [1, {g['max_tpf']:.4g}]: search {s['hypervolume_in_grid_range']:.4f}, "
            f"grid {g['hypervolume_in_grid_range']:.4f}"
        )
        verdict = "YES" if fig["search_matches_grid"] else "NO"
        lines.append(f"  search hypervolume >= grid's with at most half its runs: {verdict}")
    lines.append("\nSearch runs (by TPF):")
    lines += [f"  tpf {r['tpf']:6.3f}  quality {r['quality']:.3f}  {r['run_name']}" for r in fig["search_runs"]]
    lines.append("\nDominance over the default sampler, search and grid settings together:")
    lines.append(fig["dominance"])
    return "\n".join(lines)


def default_dirs(overrides: list[str]) -> dict[str, Path]:
    """Where `make search` and `make sweep` write, as `python -m harness.run` composes them (so `paths.output_dir`
    from conf/local/ or the overrides counts), and where the comparison goes: the search's and the grid's sweep dirs
    and `<output_dir>/bench/search.json`."""
    from hydra import compose, initialize_config_dir

    from harness.runner.configs import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        search = compose("config", overrides=["experiment=sudoku_search", *overrides], return_hydra_config=True)
        paths = [o for o in overrides if o.startswith("paths.")]  # where outputs live holds for the grid too
        grid = compose("config", overrides=["experiment=sudoku_sweep", *paths], return_hydra_config=True)
    return {
        "search": Path(search.hydra.sweep.dir),
        "grid": Path(grid.hydra.sweep.dir),
        "out": Path(search.paths.output_dir) / "bench" / "search.json",
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m harness.analysis.search_vs_grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-run", action="store_true", help="only compare what is on disk")
    ap.add_argument("--search-dir", type=Path, help="default: experiment=sudoku_search's sweep dir")
    ap.add_argument("--grid-dir", type=Path, help="default: experiment=sudoku_sweep's sweep dir (make sweep)")
    ap.add_argument("--out", type=Path, help="default: <paths.output_dir>/bench/search.json")
    ap.add_argument("overrides", nargs="*", help="extra harness.run overrides for the search")
    args = ap.parse_args(argv)
    dirs = default_dirs(args.overrides)
    search_dir, grid_dir = args.search_dir or dirs["search"], args.grid_dir or dirs["grid"]
    out = args.out or dirs["out"]
    wall = None
    if not args.skip_run:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "harness.run", "experiment=sudoku_search", *args.overrides]
        if search_dir != dirs["search"]:
            cmd.append(f"hydra.sweep.dir={search_dir}")
        subprocess.run(cmd, cwd=REPO, check=True)
        wall = time.perf_counter() - t0
    fig = compare(search_dir, grid_dir)
    fig["search_wall_s"] = wall
    print("\n" + report(fig))
    if wall is not None:
        print(f"\nsearch wall time: {wall:.0f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fig, indent=2, default=str))
    print(f"wrote {out}")
    return fig


if __name__ == "__main__":
    main()
