"""Run loggers against real wandb in offline mode, read back from the offline run files."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.loggers import (
    NoLogger,
    WandbLogger,
    find_offline_runs,
    has_wandb_api_key,
    read_offline_run,
    resolve_mode,
    run_id,
    server_unreachable,
)
from harness.pareto import make_report
from harness.store import read_metrics, read_samples
from tests.helpers.runs import make_run_dir, make_sweep


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
        rec = read_offline_run(path)
        ids.add(rec.run_id)
        metrics = read_metrics(run_dir)
        assert (rec.name, rec.group, rec.project, rec.tags) == (run_dir.name, "sweep", "proj", ["unit"])
        assert rec.config["model"] == {"name": "tiny"} and rec.config["run_dir"] == str(run_dir)
        for k in ("quality", "tpf", "nfe", "num_tokens", "tokens_per_second", "step_cap_hit_rate"):
            assert rec.summary[k] == pytest.approx(metrics[k]), k
        assert "run" not in rec.summary
        table = rec.table("samples")
        n = metrics["nfe"] // 3  # per-sample forwards
        assert table.iloc[0].to_dict() == {
            "sample_id": "q0",
            "text": "answ…",
            "correct": 1.0,
            "tpf": 16 / n,
            "nfe": n,
            "num_tokens": 16,
            "finished_by": "eos",
        }
        assert table["sample_id"].tolist() == ["q0", "q1", "q2"] and table["correct"].tolist() == [1.0, 0.0, 1.0]
    (crashed,) = find_offline_runs(tmp_path / "crashed")
    ids.add(read_offline_run(crashed).run_id)
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


@pytest.mark.slow  # real wandb (offline)
def test_sweep_summary_run_holds_tables_and_pareto_images(tmp_path, no_wandb_key):
    report = make_report([make_sweep(tmp_path)], tmp_path / "summary")
    WandbLogger(project="proj").log_sweep(
        "bound_sweep", {"runs": report.table, "fronts": report.fronts}, report.pareto_pngs, str(tmp_path / "summary")
    )
    (path,) = find_offline_runs(tmp_path / "summary" / "wandb")
    rec = read_offline_run(path)
    assert (rec.name, rec.group, rec.job_type) == ("bound_sweep-summary", "bound_sweep", "sweep_summary")
    runs = rec.table("runs")
    assert runs["run_name"].tolist() == report.table["run_name"].tolist()
    assert runs["tpf"].tolist() == pytest.approx(report.table["tpf"].tolist())
    assert runs["on_front"].tolist() == report.table["on_front"].tolist()
    assert rec.table("fronts")["aup"].tolist() == pytest.approx(report.fronts["aup"].tolist())
    png = rec.media("pareto/pareto_prompts_tpf")
    assert png.read_bytes() == (tmp_path / "summary" / "pareto_prompts_tpf.png").read_bytes()


# ---- no network: fall back to offline in bounded time; one W&B run per run dir (issue 16, item 13) --------

FAKE_KEY = "f" * 40


def _run_id_when_written(path: Path, wait_s: float = 15.0) -> str:
    """The run id an offline run recorded, once its record log is complete (holds the exit record). After a
    `wandb.teardown()` in the same process, wandb's new service sometimes writes the log a moment after
    `finish()` returned: wait for it."""
    from wandb.proto import wandb_internal_pb2 as pb

    from harness.loggers import _records

    def finished() -> bool:
        (log,) = path.glob("run-*.wandb")
        for payload in _records(log):
            rec = pb.Record()
            rec.ParseFromString(payload)
            if rec.WhichOneof("record_type") == "exit":
                return True
        return False

    deadline = time.monotonic() + wait_s
    while not finished() and time.monotonic() < deadline:
        time.sleep(0.2)
    return read_offline_run(path).run_id


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
    with caplog.at_level(logging.WARNING, logger="harness.loggers"):
        logger.start(run_dir.name, "sweep", {"seed": 0}, str(run_dir))
    elapsed = time.monotonic() - t0
    assert elapsed < 30, elapsed  # probe (<= 2 s) + an offline init; it was ~100 s and a CommError
    assert "W&B server unreachable" in caplog.text and "127.0.0.1:9" in caplog.text
    logger.finish(read_metrics(run_dir), read_samples(run_dir))
    (path,) = find_offline_runs(run_dir / "wandb")
    assert _run_id_when_written(path) == run_id(run_dir, "proj")
    assert read_offline_run(path).summary["tpf"] == pytest.approx(2.0)


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
