"""Run loggers: the app calls `start` when a Hydra job begins and `finish` when it ends; the sweep-end
callback calls `log_sweep`. `NoLogger` does nothing; `WandbLogger` makes one W&B run per job, grouped by
sweep, plus one summary run per sweep in the same group.

W&B facts this relies on (wandb 0.31): without a key it must run offline (files under
`<dir>/wandb/offline-run-*`, `wandb sync` uploads them later); in one process the next `wandb.init`
returns the previous unfinished run unless `reinit="finish_previous"`, so every job finishes its run and
every init asks for a fresh one. The tests read an offline run back (tests/helpers/wandb_offline.py).

No network (a compute node with a key but no route out): `wandb.init` online waits about 90 s and then
raises, which would kill the job before it decodes. So online mode first probes the server (a TCP connect
to `WANDB_BASE_URL`'s host, or to the HTTPS proxy when one is set, at most `probe_timeout` s, DNS included);
when it cannot be reached, or when `wandb.init` still fails within `init_timeout` s (wandb adds ~10 s of its
own for the resume check), the run goes offline with a warning and the job decodes as usual (`wandb sync`
uploads it later). Bound: about `probe_timeout + init_timeout + 15` s, 1-2 s when nothing answers.

One W&B run per run dir: the run id is a hash of the project and the run dir's absolute path (the sweep
summary: of its folder), and runs are opened with `resume="allow"`, so re-running a finished config
updates its W&B run instead of opening a duplicate.
"""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pandas as pd  # only the sweep summary and read-back touch pandas; jobs need not import it

SAMPLE_COLUMNS = [
    "sample_id",
    "text",
    "correct",
    "format_ok",
    "tpf",
    "nfe",
    "num_tokens",
    "finished_by",
    "ttft_s",
    "latency_s",
    "ttfv_s",  # sampler.stream_after_stable runs: first visible token, shown tokens later changed
    "revised_tokens",
    "corr_changed",  # committed tokens later changed, and of those wrong -> right / right -> wrong (evals.corrections)
    "corr_repairs",
    "corr_breaks",
]
DEFAULT_BASE_URL = "https://api.wandb.ai"

log = logging.getLogger(__name__)


class RunLogger(Protocol):
    def start(self, run_name: str, group: str | None, config: dict[str, Any], run_dir: str) -> None:
        """A job begins: `config` is the composed (resolved) Hydra config, `group` the sweep name."""

    def finish(self, metrics: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """The job's metrics.json content and samples.jsonl rows; closes the run."""

    def log_sweep(
        self,
        group: str,
        tables: dict[str, pd.DataFrame],
        images: list[Path],
        out_dir: str,
        videos: list[Path] | None = None,
    ) -> None:
        """Sweep end, as one summary run in `group`: every table in `tables` (`runs`: the run table of
        `harness.figures.pareto.make_report`, with its point columns; `fronts`; `steps`: canvases per step count per
        run), the figures in `images`, and films (`videos`, GIF/MP4). `runs` and `steps` also become native charts."""


class NoLogger:
    """Logs nothing (the default)."""

    def start(self, run_name: str, group: str | None, config: dict[str, Any], run_dir: str) -> None:
        pass

    def finish(self, metrics: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        pass

    def log_sweep(
        self,
        group: str,
        tables: dict[str, pd.DataFrame],
        images: list[Path],
        out_dir: str,
        videos: list[Path] | None = None,
    ) -> None:
        pass


def has_wandb_api_key() -> bool:
    """A W&B key in the environment or in the netrc entry for the configured host (as `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL)).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        auth = netrc.netrc(path).authenticators(host)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return bool(auth and auth[2])


def resolve_mode(mode: str) -> str:
    """ "auto": WANDB_MODE if set, else online with a key, offline without; anything else passes through."""
    if mode != "auto":
        return mode
    return os.environ.get("WANDB_MODE") or ("online" if has_wandb_api_key() else "offline")


def server_unreachable(base_url: str | None = None, timeout: float = 5.0) -> str | None:
    """Why the W&B server cannot be reached (None when a TCP connection opens within `timeout` s, name lookup
    included): the server of `base_url` (default `WANDB_BASE_URL`, else api.wandb.ai), or the proxy that
    `HTTPS_PROXY` / `HTTP_PROXY` name for it (unless `NO_PROXY` exempts the host)."""
    url = urlparse(base_url or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or "", p.port or 80
    result: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{host}:{port}: {type(e).__name__}: {e}")

    worker = threading.Thread(target=connect, daemon=True)  # a hanging name lookup cannot hold the job
    worker.start()
    worker.join(timeout)
    return result[0] if result else f"{host}:{port}: no answer within {timeout:g} s"


def run_id(run_dir: str | Path, project: str) -> str:
    """The W&B run id of a run dir: the same dir (re-running the same config) gives the same W&B run."""
    key = f"{project}\n{Path(run_dir).resolve()}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _truncate(text: Any, n: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


class WandbLogger:
    """One W&B run per Hydra job, grouped by sweep; metrics go to the run summary, samples to a table."""

    def __init__(
        self,
        project: str = "diffusiongemma-harness",
        entity: str | None = None,
        mode: str = "auto",
        tags: list[str] | None = None,
        text_chars: int = 300,
        init_timeout: float = 30.0,
        probe_timeout: float = 5.0,
    ):
        self.project, self.entity, self.mode = project, entity, mode
        self.tags = list(tags or [])
        self.text_chars = text_chars
        self.init_timeout, self.probe_timeout = float(init_timeout), float(probe_timeout)
        self.run = None

    def _init(self, **kwargs: Any):
        """`wandb.init` for the folder `kwargs["dir"]` (deterministic id, resumed); online falls back to
        offline, with a warning, when the server cannot be reached or init fails (see the module docstring)."""
        import wandb  # imported on use: NoLogger runs never pay for it

        Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
        mode = resolve_mode(self.mode)
        args = dict(
            project=self.project,
            entity=self.entity,
            tags=self.tags,
            reinit="finish_previous",
            id=run_id(kwargs["dir"], self.project),
            resume="allow",
            **kwargs,
        )
        if mode != "online":
            return wandb.init(mode=mode, **args)
        t0 = time.monotonic()
        why = server_unreachable(timeout=self.probe_timeout)
        if why is None:
            try:
                return wandb.init(mode=mode, settings=wandb.Settings(init_timeout=self.init_timeout), **args)
            except Exception as e:  # wandb raises CommError, AuthenticationError, ... when init fails
                why = f"wandb.init failed after {time.monotonic() - t0:.0f} s: {type(e).__name__}: {e}"
                wandb.teardown()  # the failed attempt still holds the run id in wandb's service process
        log.warning(
            "W&B server unreachable (%s); logging offline to %s instead (upload it later with `wandb sync`)",
            why,
            Path(kwargs["dir"]) / "wandb",
        )
        return wandb.init(mode="offline", **args)

    def start(self, run_name: str, group: str | None, config: dict[str, Any], run_dir: str) -> None:
        self.run = self._init(
            name=run_name, group=group, job_type="eval", dir=run_dir, config={**config, "run_dir": str(run_dir)}
        )

    def finish(self, metrics: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        import wandb

        if self.run is None:
            raise RuntimeError("WandbLogger.finish() without start()")
        self.run.summary.update({k: v for k, v in metrics.items() if k != "run"})
        table = wandb.Table(
            columns=SAMPLE_COLUMNS,
            data=[
                [
                    r["sample_id"],
                    _truncate(r.get("text"), self.text_chars),
                    r.get("correct"),
                    r.get("format_ok"),
                    r.get("tpf"),
                    r.get("nfe"),
                    r.get("num_tokens"),
                    r.get("finished_by"),
                    r.get("ttft_s"),
                    r.get("latency_s"),
                    r.get("ttfv_s"),
                    r.get("revised_tokens"),
                    r.get("corr_changed"),
                    r.get("corr_repairs"),
                    r.get("corr_breaks"),
                ]
                for r in rows
            ],
        )
        payload: dict[str, Any] = {"samples": table}
        if curve := acceptance_curve(rows):  # diffusion runs: how many tokens each denoising step keeps
            steps = wandb.Table(columns=ACCEPTANCE_COLUMNS, data=curve)
            payload["acceptance"] = wandb.plot.line(
                steps, "step", "mean_accepted", title="mean accepted tokens per denoising step (all canvases)"
            )
        self.run.log(payload)
        self.run.finish()
        self.run = None

    def log_sweep(
        self,
        group: str,
        tables: dict[str, pd.DataFrame],
        images: list[Path],
        out_dir: str,
        videos: list[Path] | None = None,
    ) -> None:
        import wandb

        run = self._init(name=f"{group}-summary", group=group, job_type="sweep_summary", dir=out_dir)
        payload: dict[str, Any] = {
            name: wandb.Table(dataframe=df.reset_index(drop=True), allow_mixed_types=True)
            for name, df in tables.items()
        }
        if "runs" in tables:
            payload.update(pareto_charts(tables["runs"]))
        if "steps" in tables:
            payload.update(steps_histograms(tables["steps"]))
        payload.update({f"pareto/{Path(p).stem}": wandb.Image(str(p)) for p in images})
        for p in videos or []:  # films (harness.figures.films): one panel each, named by run folder and file
            p = Path(p)
            if p.suffix.lower() in VIDEO_FORMATS:
                payload[f"films/{p.parent.name}/{p.stem}"] = wandb.Video(str(p), format=p.suffix.lower()[1:])
        run.log(payload)
        run.finish()


# ---- native W&B charts -------------------------------------------------------------------------------------

ACCEPTANCE_COLUMNS = ["step", "mean_accepted", "mean_renoised", "canvases"]
VIDEO_FORMATS = (".gif", ".mp4", ".webm", ".ogg")
# The columns of a Pareto chart's table (besides the knobs): what a W&B user colours, filters and hovers by.
POINT_TABLE_COLUMNS = [
    "run_name",
    "model",
    "label",
    "family",
    "family_name",
    "point_label",
    "is_default",
    "dominates_default",
    "on_front",
    "quality",
    "quality_lo",
    "quality_hi",
    "num_samples",
    "tpf",
    "tpf_lo",
    "tpf_hi",
    "step_cap_hit_rate",
    "tokens_per_second",
    "tokens_per_second_lo",
    "tokens_per_second_hi",
    "front_area",
    "aup_d3llm",
    "aup_y_max",
]


def acceptance_curve(rows: list[dict[str, Any]]) -> list[list[float]]:
    """Per denoising step index (1 = a canvas' first step): mean tokens accepted and re-noised at that step over
    every canvas of every sample that reached it, and how many canvases did (the mean's sample size).
    Empty for AR runs (no `accepted_per_step`)."""
    acc: dict[int, list[float]] = {}
    for r in rows:
        renoised = r.get("renoised_per_step") or []
        for c, canvas in enumerate(r.get("accepted_per_step") or []):
            ren = renoised[c] if c < len(renoised) else []
            for j, a in enumerate(canvas):
                s = acc.setdefault(j + 1, [0.0, 0.0, 0])
                s[0] += a
                s[1] += ren[j] if j < len(ren) else 0
                s[2] += 1
    return [[step, a / n, b / n, n] for step, (a, b, n) in sorted(acc.items())]


def _knob_columns(points: pd.DataFrame) -> dict[str, str]:
    """`sampler.<knob>` columns set in some run -> the knob's bare name (W&B chart fields cannot hold dots)."""
    from harness.analysis.aggregate import SAMPLER_PREFIX

    return {c: c[len(SAMPLER_PREFIX) :] for c in points if c.startswith(SAMPLER_PREFIX) and points[c].notna().any()}


def pareto_charts(runs: pd.DataFrame) -> dict[str, Any]:
    """Per eval with quality scores: quality vs TPF and vs tokens/s as native scatter charts, and each sampler
    family's front (plus each model's) as a line series, from tables holding every knob, the family, the Wilson
    interval and the default / dominance flags, so the W&B UI can colour, filter and hover by any of them."""
    import pandas as pd
    import wandb

    from harness.analysis.fronts import front_mask
    from harness.figures.pareto import safe_stem
    from harness.figures.plot_points import POINT_COLUMNS, plot_points

    charts: dict[str, Any] = {}
    if not {"eval", "model", "label", "quality"} <= set(
        runs
    ):  # not a run table (harness.analysis.aggregate): no charts
        return charts
    pts = runs if set(POINT_COLUMNS) <= set(runs) else plot_points(runs)
    for ev, g in pts.groupby("eval", sort=True):
        g = g[pd.to_numeric(g["quality"], errors="coerce").notna()]
        if g.empty:
            continue
        knobs = _knob_columns(g)
        cols = [c for c in POINT_TABLE_COLUMNS if c in g]
        table = g[cols + list(knobs)].rename(columns=knobs).reset_index(drop=True)
        for x in ("tpf", "tokens_per_second"):
            if x not in g or g[x].isna().all():
                continue
            key = f"pareto/{safe_stem(ev)}/quality_vs_{x}"
            points = wandb.Table(dataframe=table, allow_mixed_types=True)
            charts[key] = wandb.plot.scatter(points, x, "quality", title=f"{ev}: quality vs {x}")
            lines = []
            for series, s in [
                *g.groupby("family_name", sort=True),
                *[(f"front: {m}", s) for m, s in g.groupby("model")],
            ]:
                s = s[s[x].notna()]
                f = s[front_mask(s[x], s["quality"])].sort_values(x)
                lines += [[series, fx, fq] for fx, fq in zip(f[x], f["quality"])]
            fronts = wandb.Table(columns=["series", x, "quality"], data=lines)
            charts[f"pareto/{safe_stem(ev)}/fronts_vs_{x}"] = wandb.plot.line(
                fronts, x, "quality", stroke="series", title=f"{ev}: front per sampler family and per model ({x})"
            )
    return charts


def steps_histograms(steps: pd.DataFrame) -> dict[str, Any]:
    """`steps/<run>`: a native histogram of denoising steps per canvas for each run (integer bins)."""
    import numpy as np
    import wandb

    out: dict[str, Any] = {}
    for name, g in steps.groupby("run_name", sort=True):
        top = int(g["steps"].max())
        counts = np.zeros(top + 1, dtype=int)  # bin k holds the canvases that took k steps
        np.add.at(counts, g["steps"].astype(int).to_numpy(), g["canvases"].astype(int).to_numpy())
        out[f"steps/{name}"] = wandb.Histogram(np_histogram=(counts.tolist(), (np.arange(top + 2) - 0.5).tolist()))
    return out
