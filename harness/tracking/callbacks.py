"""Hydra callbacks. `SweepSummary` runs once in the launching process after every job of a multirun has
returned (any launcher): it aggregates the sweep dir, writes the table and the Pareto figures under
`<sweep dir>/<subdir>`, prints the table, and hands both to the configured logger (W&B: one summary run
in the sweep's group, with the fronts as native charts, step histograms and films; docs/dashboard.md).
Hydra skips `on_multirun_end` when a job fails; run `python -m harness.pareto <sweep dir>` by hand then
(finished runs are still aggregated, unfinished ones are listed). A run whose `metrics.json` cannot be read is
listed as broken, its file named, and the others are still summarized.

Hydra instantiates the callback before every run, single runs included, so the aggregation and figure modules
(pandas, scipy, matplotlib: about 4 s) are imported inside `on_multirun_end`, never at construction: a bad config
must fail before they load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig

from harness.tracking.loggers import NoLogger, RunLogger


class SweepSummary(Callback):
    """`group`: the W&B group the jobs logged under (`${sweep_name}` in the app); default: the sweep folder name."""

    def __init__(
        self,
        group: str | None = None,
        subdir: str = "summary",
        tpf_range: list[float] | None = None,
        max_trajectories: int = 1,
        films: int = 0,
    ):
        self.group = group
        self.subdir = subdir
        self.tpf_range = (float(tpf_range[0]), float(tpf_range[1])) if tpf_range else None
        self.max_trajectories = max_trajectories
        self.films = films  # denoising films (harness.figures.films) of the first N samples of each trajectory run

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.analysis.aggregate import find_run_dirs, print_summary
        from harness.analysis.parallelbench import pbx_table
        from harness.figures.experts_plot import experts_figures
        from harness.figures.films import sweep_films
        from harness.figures.pareto import make_report

        sweep_dir = Path(str(config.hydra.sweep.dir))
        out_dir = sweep_dir / self.subdir
        if not find_run_dirs([sweep_dir]).complete:
            print(f"[sweep summary] no finished runs under {sweep_dir}; nothing to aggregate")
            return
        report = make_report([sweep_dir], out_dir, self.tpf_range, self.max_trajectories)
        print(f"\n[sweep summary] {sweep_dir}")
        print_summary(report.table, report.fronts)  # lists runs whose metrics.json is broken, file named
        if report.table.empty:
            print(f"[sweep summary] no readable finished runs under {sweep_dir}; nothing to log")
            return
        print(f"[sweep summary] wrote {len(report.files)} files under {out_dir}")
        runs = find_run_dirs([sweep_dir]).complete
        experts_pngs = experts_figures(runs, out_dir)
        films = sweep_films(runs, out_dir / "films", self.films) if self.films else []
        if experts_pngs or films:
            print(f"[sweep summary] wrote {len(experts_pngs)} expert-activation figures, {len(films)} film files")
        logger: RunLogger = instantiate(config.logger) if config.get("logger") else NoLogger()
        tables = {"runs": report.table, "fronts": report.fronts, "steps": report.steps}
        if not (pb := pbx_table(report.table)).empty:  # ParallelBench runs: PBx per strategy, and its figure
            tables["parallelbench"] = pb
        pb_pngs = [p for p in report.files if p.name == "parallelbench.png"]
        logger.log_sweep(
            self.group or sweep_dir.name,
            tables,
            report.pareto_pngs + pb_pngs + [p for p in experts_pngs if p.suffix == ".png"],
            str(out_dir),
            videos=films,  # GIF/MP4 films become W&B videos; other files are skipped
        )
