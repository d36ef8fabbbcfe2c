"""Run loggers against real wandb in offline mode, read back from the offline run files."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.figures.pareto import make_report
from harness.runner.store import read_metrics, read_samples
from harness.tracking.loggers import (
    NoLogger,
    WandbLogger,
    acceptance_curve,
    has_wandb_api_key,
    resolve_mode,
    run_id,
    server_unreachable,
)
from tests.helpers.runs import make_run_dir, make_sweep
from tests.helpers.wandb_offline import find_offline_runs, read_offline_run

# wandb's service process may finish writing a run's log a moment after finish() returned (seen under load):
# read it back once complete
WAIT_S = 20.0


@pytest.fixture
def no_wandb_key(tmp_path, monkeypatch):
    for k in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_auto_mode_is_offline_without_a_key(no_wandb_key, monkeypatch):
    assert not has_wandb_api_key() and resolve_mode("auto") == "offline"
    netrc = no_wandb_key / ".netrc"
    netrc.write_text("machine example.org login user password secret\n")
    assert resolve_mode("auto") == "offline"  # a key for another host does not count
    netrc.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    netrc.chmod(0o600)
    assert has_wandb_api_key() and resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.mycorp.net")
    assert resolve_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode("auto") == "disabled"  # an explicit environment choice wins
    assert resolve_mode("offline") == "offline"


@pytest.mark.slow  # real wandb (offline)
def test_one_offline_run_per_job_with_metrics_and_samples_table(tmp_path, no_wandb_key):
    runs = [
        make_run_dir(
            tmp_path / "sweep",
            name,
            [(16, n, c, [n]) for c in (1, 0, 1)],
            sampler={"name": "entropy_bound", "max_steps": 8, "entropy_bound": b},
        )
        for name, n, b in (("b0.1", 8, 0.1), ("b0.5", 2, 0.5))
    ]
    logger = WandbLogger(project="proj", tags=["unit"], text_chars=5)
    # the first job "crashes" (never finishes): the next start must still get a fresh run, not the old one
    logger.start("crashed", "sweep", {"seed": 9}, str(tmp_path / "crashed"))
    for run_dir in runs:  # jobs of one sweep in one process, as Hydra's basic launcher runs them
        metrics = read_metrics(run_dir)
        logger.start(run_dir.name, "sweep", {"model": {"name": "tiny"}, "seed": 0}, str(run_dir))
        logger.finish(metrics, read_samples(run_dir))
    with pytest.raises(RuntimeError):
        logger.finish({}, [])

    ids = set()
    for run_dir in runs:
        (path,) = find_offline_runs(run_dir / "wandb")
        rec = read_offline_run(path, wait_s=WAIT_S)
        ids.add(rec.run_id)
        metrics = read_metrics(run_dir)
        assert (rec.name, rec.group, rec.project, rec.tags) == (run_dir.name, "sweep", "proj", ["unit"])
        assert rec.config["model"] == {"name": "tiny"} and rec.config["run_dir"] == str(run_dir)
        for k in ("quality", "tpf", "nfe", "num_tokens", "tokens_per_second", "step_cap_hit_rate"):
            assert rec.summary[k] == pytest.approx(metrics[k]), k
        for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "latency_p99_s", "user_tokens_per_second_p5"):
            assert rec.summary[k] == pytest.approx(metrics[k]) and metrics[k] > 0, k  # latency as users see it
        assert "run" not in rec.summary
        table = rec.table("samples")
        n = metrics["nfe"] // 3  # per-sample forwards
        assert table.iloc[0].to_dict() == {
            "sample_id": "q0",
            "text": "answ…",
            "correct": 1.0,
            "format_ok": None,
            "tpf": 16 / n,
            "nfe": n,
            "num_tokens": 16,
            "finished_by": "eos",
            "ttft_s": pytest.approx(0.01 * n),
            "latency_s": pytest.approx(0.03 * n),
            "ttfv_s": None,
            "revised_tokens": None,
            "corr_changed": None,  # no trajectory: self-correction not measured (evals.corrections)
            "corr_repairs": None,
            "corr_breaks": None,
        }
        assert table["sample_id"].tolist() == ["q0", "q1", "q2"] and table["correct"].tolist() == [1.0, 0.0, 1.0]
    (crashed,) = find_offline_runs(tmp_path / "crashed")
    ids.add(read_offline_run(crashed, wait_s=WAIT_S).run_id)
    assert len(ids) == 3


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` (hidden ones too) with its size and mtime."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _log_a_job_and_a_sweep(logger, tmp_path: Path, monkeypatch) -> tuple[dict, dict]:
    """One job and one sweep summary through `logger`, with every place wandb may write (cwd, HOME, WANDB_*
    dirs, the run and sweep dirs) under `tmp_path`: the full listing of `tmp_path` before and after."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    for d in (home, cwd):
        d.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    for k in (
        "WANDB_API_KEY",
        "WANDB_BASE_URL",
        "NETRC",
        "WANDB_DIR",
        "WANDB_CACHE_DIR",
        "WANDB_CONFIG_DIR",
        "WANDB_DATA_DIR",
        "WANDB_ARTIFACT_DIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
    ):
        monkeypatch.delenv(k, raising=False)
    run_dir = make_run_dir(
        tmp_path / "sweep",
        "b0.1",
        [(16, 8, 1, [4, 4]), (8, 4, 0, [2])],
        sampler={"name": "entropy_bound", "max_steps": 4, "entropy_bound": 0.1},
    )
    image = tmp_path / "plot.png"
    image.write_bytes(_PNG)
    before = _listing(tmp_path)
    logger.start(run_dir.name, "sweep", {"model": {"name": "tiny"}, "seed": 0}, str(run_dir))
    logger.finish(read_metrics(run_dir), read_samples(run_dir))
    table = pd.DataFrame({"run_name": [run_dir.name], "tpf": [2.0]})
    logger.log_sweep("sweep", {"runs": table}, [image], str(tmp_path / "sweep" / "summary"))
    return before, _listing(tmp_path)


# a valid 1x1 PNG (wandb.Image reads the file)
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000b49444154789c6360000200000500017a5eab3f0000000049454e44ae426082"
)


def test_no_logger_writes_nothing(tmp_path, monkeypatch):
    before, after = _log_a_job_and_a_sweep(NoLogger(), tmp_path, monkeypatch)
    assert after == before  # no file or folder added or changed anywhere: run dir, sweep dir, cwd, HOME


@pytest.mark.slow
def test_the_listing_sees_what_a_real_logger_writes(tmp_path, monkeypatch):
    """Control for the test above: the same job through WandbLogger (offline) changes the listing."""
    before, after = _log_a_job_and_a_sweep(WandbLogger(project="proj", mode="offline"), tmp_path, monkeypatch)
    added = set(after) - set(before)
    assert any(p.startswith("sweep/b0.1/wandb/offline-run-") for p in added)
    assert any(p.startswith("sweep/summary/wandb/offline-run-") for p in added)


def _tiny_gif(path: Path) -> Path:
    import imageio.v3 as iio
    import numpy as np

    frames = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    for i in range(3):
        frames[i, :, : 2 * (i + 1)] = 255
    iio.imwrite(path, frames, extension=".gif", duration=250, loop=0)
    return path


@pytest.mark.slow  # real wandb (offline)
def test_sweep_summary_run_is_a_dashboard(tmp_path, no_wandb_key):
    """Issue 15 part 4: the summary run holds the tables, the front as native W&B charts built from tables with
    knob columns, a native step histogram per run, the Pareto PNGs and the films, all read back from disk."""
    report = make_report([make_sweep(tmp_path)], tmp_path / "summary")
    gif = _tiny_gif(tmp_path / "b0.05_q0.gif")
    WandbLogger(project="proj").log_sweep(
        "bound_sweep",
        {"runs": report.table, "fronts": report.fronts, "steps": report.steps},
        report.pareto_pngs,
        str(tmp_path / "summary"),
        videos=[gif, tmp_path / "summary" / "summary.csv"],  # only GIF/MP4 files become videos
    )
    (path,) = find_offline_runs(tmp_path / "summary" / "wandb")
    rec = read_offline_run(path, wait_s=WAIT_S)
    assert (rec.name, rec.group, rec.job_type) == ("bound_sweep-summary", "bound_sweep", "sweep_summary")
    runs = rec.table("runs")
    assert runs["run_name"].tolist() == report.table["run_name"].tolist()
    assert runs["tpf"].tolist() == pytest.approx(report.table["tpf"].tolist())
    assert runs["on_front"].tolist() == report.table["on_front"].tolist()
    assert runs["family"].tolist() == report.table["family"].tolist()  # colour/filter the table by family
    assert rec.table("fronts")["front_area"].tolist() == pytest.approx(report.fronts["front_area"].tolist())
    assert rec.table("fronts")["aup_d3llm"].tolist() == pytest.approx(report.fronts["aup_d3llm"].tolist())
    assert runs["tpf_lo"].tolist() == pytest.approx(report.table["tpf_lo"].tolist())  # the TPF interval travels
    png = rec.media("pareto/pareto_prompts_tpf")
    assert png.read_bytes() == (tmp_path / "summary" / "pareto_prompts_tpf.png").read_bytes()

    # native charts: a scatter per x axis and a line series of fronts, each backed by its own table
    charts = rec.config["_wandb"]["visualize"]
    for x in ("tpf", "tokens_per_second"):
        scatter = charts[f"pareto/prompts/quality_vs_{x}"]["panel_config"]
        assert scatter["panelDefId"].startswith("wandb/scatter/") and scatter["fieldSettings"] == {
            "x": x,
            "y": "quality",
        }
        lines = charts[f"pareto/prompts/fronts_vs_{x}"]["panel_config"]
        assert lines["panelDefId"].startswith("wandb/line/")
        assert lines["fieldSettings"] == {"x": x, "y": "quality", "stroke": "series"}
    points = rec.table("pareto/prompts/quality_vs_tpf_table").set_index("run_name")
    assert sorted(points.index) == sorted(report.table["run_name"])
    assert points.loc["b0.5", "entropy_bound"] == 0.5 and points.loc["b0.5", "max_steps"] == 4  # knob columns
    assert points.loc["b0.5", "family"] == "entropy_bound" and points.loc["ar", "label"] == "ar"
    assert points.loc["b0.1", "quality_lo"] == pytest.approx(
        report.table.set_index("run_name").loc["b0.1", "quality_lo"]
    )
    for c in ("tpf_lo", "tpf_hi", "step_cap_hit_rate", "front_area", "aup_d3llm", "aup_y_max"):  # hover / filter
        assert points.loc["b0.05", c] == pytest.approx(report.table.set_index("run_name").loc["b0.05", c])
    fronts = rec.table("pareto/prompts/fronts_vs_tpf_table")
    tiny = fronts[fronts["series"] == "front: tiny"]
    assert tiny["tpf"].tolist() == pytest.approx([16 / 7, 4.0, 6.0]) and tiny["quality"].tolist() == [1.0, 0.5, 0.0]
    assert set(fronts["series"]) == {"entropy bound", "AR", "AR+MTP", "front: tiny", "front: ar-base"}

    # one native histogram of steps per canvas per diffusion run, integer bins
    hist = rec.summary["steps/b0.05"]
    assert hist["_type"] == "histogram" and hist["bins"] == [-0.5, 0.5, 1.5, 2.5, 3.5, 4.5]
    assert hist["values"] == [0, 0, 0, 2, 2]  # canvases of 3 and of 4 steps
    assert rec.summary["steps/b0.1"]["values"] == [0, 0, 4] and not any(k.startswith("steps/ar") for k in rec.summary)
    assert rec.table("steps")["canvases"].sum() == 12

    # films: the GIF as a W&B video (bytes unchanged); the CSV was not a film
    video = rec.summary[f"films/{tmp_path.name}/b0.05_q0"]
    assert (
        video["_type"] == "video-file" and rec.media(f"films/{tmp_path.name}/b0.05_q0").read_bytes() == gif.read_bytes()
    )
    assert [k for k in rec.summary if k.startswith("films/")] == [f"films/{tmp_path.name}/b0.05_q0"]


def test_acceptance_curve_by_hand():
    rows = [
        {"accepted_per_step": [[4, 10], [6]], "renoised_per_step": [[12, 6], [10]]},
        {"accepted_per_step": [[2, 8, 16]], "renoised_per_step": [[14, 8, 0]]},
        {"accepted_per_step": [], "renoised_per_step": []},  # an AR sample
    ]
    # step 1: (4 + 6 + 2) / 3 canvases; step 2: (10 + 8) / 2; step 3: 16 / 1
    assert acceptance_curve(rows) == [[1, 4.0, 12.0, 3], [2, 9.0, 7.0, 2], [3, 16.0, 0.0, 1]]
    assert acceptance_curve([{"steps_per_canvas": []}]) == []


@pytest.mark.slow  # real wandb (offline)
def test_each_run_logs_its_acceptance_curve(tmp_path, no_wandb_key):
    """Issue 15 part 4: every diffusion run logs its per-step acceptance curve as a native W&B line plot."""
    from contract.records import GenerationResult

    rows = [
        GenerationResult(
            sample_id=f"q{i}", token_ids=[1] * 16, text="x", nfe=3, accepted_per_step=[acc], renoised_per_step=[ren]
        ).to_dict()
        for i, (acc, ren) in enumerate((([4, 12, 16], [12, 4, 0]), ([8, 16], [8, 0])))
    ]
    logger = WandbLogger(project="proj", mode="offline")
    logger.start("b0.1", "sweep", {"seed": 0}, str(tmp_path / "b0.1"))
    logger.finish({"tpf": 16 / 2.5}, rows)
    logger.start("ar", "sweep", {"seed": 0}, str(tmp_path / "ar"))
    logger.finish({"tpf": 1.0}, [GenerationResult(sample_id="q0", token_ids=[1], text="x", nfe=1).to_dict()])
    (path,) = find_offline_runs(tmp_path / "b0.1" / "wandb")
    rec = read_offline_run(path, wait_s=WAIT_S)
    chart = rec.config["_wandb"]["visualize"]["acceptance"]["panel_config"]
    assert chart["panelDefId"].startswith("wandb/line/") and chart["fieldSettings"] == {
        "x": "step",
        "y": "mean_accepted",
        "stroke": None,
    }
    curve = rec.table("acceptance_table")
    assert curve.values.tolist() == [[1, 6.0, 10.0, 2], [2, 14.0, 2.0, 2], [3, 16.0, 0.0, 1]]
    (ar,) = find_offline_runs(tmp_path / "ar" / "wandb")
    assert "acceptance_table" not in read_offline_run(ar, wait_s=WAIT_S).summary  # no denoising steps, no curve


# ---- no network: fall back to offline in bounded time; one W&B run per run dir (issue 16, item 13) --------

FAKE_KEY = "f" * 40


def _run_id_when_written(path: Path, wait_s: float = WAIT_S) -> str:
    """The run id an offline run recorded, once its record log is complete (holds the exit record)."""
    return read_offline_run(path, wait_s=wait_s).run_id


@pytest.fixture
def key_but_no_network(no_wandb_key, monkeypatch):
    """A W&B key and a server address where nothing listens (port 9 on this host): a compute node with a
    key and no route out, without touching any real network."""
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    assert resolve_mode("auto") == "online"


def test_the_probe_tells_a_closed_port_from_a_listening_one(key_but_no_network):
    t0 = time.monotonic()
    why = server_unreachable(timeout=2)
    assert why is not None and "127.0.0.1:9" in why and time.monotonic() - t0 < 2.5
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert server_unreachable(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=2) is None


def test_run_ids_follow_the_run_dir(tmp_path):
    a, b = tmp_path / "sweep" / "run_a", tmp_path / "sweep" / "run_b"
    assert run_id(a, "proj") == run_id(tmp_path / "sweep" / ".." / "sweep" / "run_a", "proj")
    assert len({run_id(a, "proj"), run_id(b, "proj"), run_id(a, "other")}) == 3
    assert run_id(a, "proj").isalnum() and len(run_id(a, "proj")) <= 64


@pytest.mark.slow  # real wandb
def test_a_key_without_network_logs_offline_within_the_bound(tmp_path, key_but_no_network, caplog):
    """Online mode (a key is set) with the server unreachable: was ~90 s and a CommError before decoding."""
    run_dir = make_run_dir(tmp_path / "sweep", "b0.1", [(16, 8, 1, [4, 4])], sampler={"name": "entropy_bound"})
    logger = WandbLogger(project="proj", init_timeout=5, probe_timeout=2)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="harness.tracking.loggers"):
        logger.start(run_dir.name, "sweep", {"seed": 0}, str(run_dir))
    elapsed = time.monotonic() - t0
    assert elapsed < 30, elapsed  # probe (<= 2 s) + an offline init; it was ~100 s and a CommError
    assert "W&B server unreachable" in caplog.text and "127.0.0.1:9" in caplog.text
    logger.finish(read_metrics(run_dir), read_samples(run_dir))
    (path,) = find_offline_runs(run_dir / "wandb")
    assert _run_id_when_written(path) == run_id(run_dir, "proj")
    assert read_offline_run(path, wait_s=WAIT_S).summary["tpf"] == pytest.approx(2.0)


@pytest.mark.slow  # real wandb, waits init_timeout
def test_a_server_that_never_answers_falls_back_offline_within_the_bound(tmp_path, key_but_no_network, monkeypatch):
    """The port accepts connections (the probe passes) but nothing ever answers: wandb.init gives up after
    init_timeout (+ wandb's own resume check) and the run goes offline, in the same process."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(50)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{srv.getsockname()[1]}")
        run_dir = tmp_path / "run"
        logger = WandbLogger(project="proj", init_timeout=2, probe_timeout=2)
        t0 = time.monotonic()
        logger.start("run", None, {"seed": 0}, str(run_dir))
        assert time.monotonic() - t0 < 2 + 2 + 25
        logger.finish({"quality": 1.0}, [])
    offline = find_offline_runs(run_dir / "wandb")
    assert [_run_id_when_written(p) for p in offline] == [run_id(run_dir, "proj")]


@pytest.mark.slow  # real wandb (offline)
def test_rerunning_a_config_reuses_its_wandb_run(tmp_path, no_wandb_key):
    """Re-running a finished config logs into the same W&B run (same id, resumed), never a second one;
    another run dir gets its own."""
    run_dir = make_run_dir(tmp_path / "sweep", "b0.1", [(16, 8, 1, [4, 4])], sampler={"name": "entropy_bound"})
    other = make_run_dir(tmp_path / "sweep", "b0.5", [(16, 4, 1, [2, 2])], sampler={"name": "entropy_bound"})
    logger = WandbLogger(project="proj", mode="offline")
    for d in (run_dir, run_dir, other):
        logger.start(d.name, "sweep", {"seed": 0}, str(d))
        logger.finish(read_metrics(d), read_samples(d))
    ids = [_run_id_when_written(p) for p in find_offline_runs(run_dir / "wandb")]
    assert ids == [run_id(run_dir, "proj")] * 2  # two sessions of one W&B run (`wandb sync` resumes it)
    (path,) = find_offline_runs(other / "wandb")
    assert _run_id_when_written(path) == run_id(other, "proj") != ids[0]
