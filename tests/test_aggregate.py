"""Aggregation of real run dirs (written through ResultStore exactly as harness.runner.evaluate writes them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from contract.records import GenerationResult
from harness.analysis.aggregate import collect, find_run_dirs, summarize
from harness.runner.store import ResultStore
from tests.helpers.runs import make_run_dir, make_sweep

REPO = Path(__file__).resolve().parents[1]


def test_collects_a_multirun_into_one_row_per_finished_run(tmp_path):
    sweep = make_sweep(tmp_path)
    dirs = find_run_dirs([sweep])
    assert [d.name for d in dirs.complete] == ["ar", "ar_mtp", "b0.05", "b0.1", "b0.5"]
    assert [d.name for d in dirs.incomplete] == ["crashed"]

    df = collect([sweep, sweep / "b0.1"])  # overlapping paths: each run once
    assert len(df) == 5
    r = df.set_index("run_name")
    # identity and knobs as columns
    assert r.loc["b0.1", "label"] == "diffusion" and r.loc["ar_mtp", "label"] == "ar+mtp"
    assert r.loc["b0.05", "sampler.entropy_bound"] == 0.05 and r.loc["b0.5", "sampler.max_steps"] == 4
    assert r.loc["b0.1", "sampler"] == "entropy_bound" and r.loc["ar", "sampler"] == "ar"
    assert pd.isna(r.loc["ar", "sampler.entropy_bound"])
    # benchmark TPF = summed tokens / summed forwards, not a mean of ratios
    assert r.loc["b0.05", "tpf"] == pytest.approx(32 / 14)
    assert r.loc["b0.5", "tpf"] == pytest.approx(24 / 4)
    assert r.loc["ar", "tpf"] == pytest.approx(1.0)
    assert r.loc["b0.1", "quality"] == pytest.approx(0.5)
    assert r.loc["b0.1", "solved_by_bucket.hard"] == 1.0
    # steps per canvas read back from samples.jsonl; cap = 4 hit by the two 4-step canvases of b0.05
    assert r.loc["b0.05", ["num_canvases", "steps_min", "steps_max", "step_cap_hits"]].tolist() == [4, 3, 4, 2]
    assert r.loc["b0.05", "steps_p50"] == pytest.approx(3.5)
    assert r.loc["b0.05", "step_cap_hit_rate"] == pytest.approx(0.5)
    assert r.loc["ar", "num_canvases"] == 0
    assert df["consistent"].all()
    assert Path(r.loc["b0.1", "run_dir"]) == (sweep / "b0.1").resolve()


def test_flags_a_run_whose_metrics_no_longer_match_its_samples(tmp_path):
    run = make_run_dir(tmp_path, "stale", [(16, 4, 1, [2, 2])], sampler={"name": "entropy_bound", "max_steps": 4})
    ResultStore(run).append({**GenerationResult("q9", [1, 2], "x", nfe=2).to_dict(), "correct": 0.0})
    (run / "samples.jsonl").open("a").write('{"sample_id": "torn')  # a crash mid-write: ignored
    row = collect([tmp_path]).iloc[0]
    assert row["samples_rows"] == 2
    assert not row["consistent"]


def test_summary_files_round_trip(tmp_path):
    sweep = make_sweep(tmp_path)
    table, fronts, files = summarize([sweep], tmp_path / "out")
    assert sorted(p.name for p in files) == ["fronts.csv", "summary.csv", "summary.parquet"]
    back = pd.read_parquet(tmp_path / "out" / "summary.parquet")
    csv = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(back["run_name"]) == list(table["run_name"]) == list(csv["run_name"])
    assert back["tpf"].tolist() == pytest.approx(table["tpf"].tolist())
    assert set(fronts["model"]) == {"tiny", "ar-base"}


@pytest.mark.slow
def test_cli(tmp_path):
    sweep = make_sweep(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "harness.analysis.aggregate", str(sweep), "--out", str(tmp_path / "summary")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "incomplete run" in out.stdout and "crashed" in out.stdout
    table_text = out.stdout.split("\n\n")[0]
    assert all(name in table_text for name in ("b0.05", "b0.1", "b0.5", "ar_mtp"))
    assert "sampler.entropy_bound" in table_text and "ar+mtp" in table_text
    assert "front_area" in out.stdout and "aup_d3llm" in out.stdout
    summary = pd.read_csv(tmp_path / "summary" / "summary.csv")
    assert len(summary) == 5


def test_one_samples_reader_drops_every_bad_line(tmp_path):
    """store.read_samples (read-only) and ResultStore.load (resume) read alike: first row per id wins and any
    bad line is dropped, not only a torn last one; only load rewrites the file."""
    from harness.runner.store import read_samples

    def row(sid: str, n: int) -> dict:
        return {"sample_id": sid, "n": n, "num_tokens": 1, "nfe": 1, "wall_time_s": 0.0}

    store = ResultStore(tmp_path / "run")
    store.append(row("a", 1))
    with store.samples_path.open("a") as f:
        f.write("not json\n")
    store.append(row("b", 2))
    store.append(row("a", 3))  # a duplicate: the first row stays
    with store.samples_path.open("a") as f:
        f.write('{"sample_id": "c"')  # torn last line
    before = store.samples_path.read_text()
    assert read_samples(store.run_dir) == [row("a", 1), row("b", 2)]
    assert store.samples_path.read_text() == before
    assert store.load() == {"a": row("a", 1), "b": row("b", 2)}
    assert "not json" not in store.samples_path.read_text() and store.samples_path.read_text().endswith("\n")
    assert read_samples(tmp_path / "nothing_here") == []


def _truncate_metrics(run_dir: Path) -> Path:
    """metrics.json cut mid-file, as an interrupted copy or a full disk leaves it."""
    path = run_dir / "metrics.json"
    path.write_text(path.read_text()[:40])
    return path.resolve()


def test_a_broken_metrics_file_is_listed_and_the_other_runs_aggregated(tmp_path, capsys):
    """Issue 16 item 10: one truncated metrics.json crashed the whole aggregation with an unnamed JSONDecodeError."""
    from harness.analysis.aggregate import main

    sweep = make_sweep(tmp_path)
    broken = _truncate_metrics(sweep / "b0.1")
    (sweep / "b0.5" / "metrics.json").write_bytes(b"\xff\xfe{}")  # not UTF-8
    df = collect([sweep])
    assert sorted(df["run_name"]) == ["ar", "ar_mtp", "b0.05"]
    assert [(Path(d).name, why.split(": ", 1)[0]) for d, why in df.attrs["broken"]] == [
        ("b0.1", f"{broken}:3"),  # the file and the line where it breaks off
        ("b0.5", str((sweep / "b0.5" / "metrics.json").resolve())),
    ]
    out = capsys.readouterr().out
    assert f"skipping broken run ({broken}:3: not valid JSON" in out and "not UTF-8" in out

    main([str(sweep), "--out", str(tmp_path / "summary")])  # the CLI: exit 0, table written, broken runs named
    out = capsys.readouterr().out
    assert "2 broken run(s), not in the table:" in out and f"{broken}:3: not valid JSON" in out
    assert len(pd.read_csv(tmp_path / "summary" / "summary.csv")) == 3


def test_unreadable_sample_lines_are_counted_in_the_table(tmp_path, capsys):
    run = make_run_dir(tmp_path, "r", [(16, 4, 1, [2, 2]), (8, 4, 0, [2])], sampler={"name": "entropy_bound"})
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    (run / "samples.jsonl").write_text(lines[0] + "{}\n" + lines[1])
    row = collect([tmp_path]).iloc[0]
    assert row["samples_rows"] == 2 and row["samples_bad_lines"] == 1 and row["consistent"]
    assert "samples.jsonl: skipped 1 unreadable line(s) (line 2: no sample_id string)" in capsys.readouterr().out


def test_a_reversed_tpf_range_is_refused(tmp_path):
    from harness.analysis.aggregate import main

    with pytest.raises(SystemExit, match="tpf-range"):
        main([str(tmp_path), "--out", str(tmp_path / "out"), "--tpf-range", "10", "1"])
