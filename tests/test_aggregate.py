"""Aggregation of real run dirs (written through ResultStore exactly as harness.evaluate writes them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.aggregate import collect, find_run_dirs, summarize
from harness.records import GenerationResult, decode_metrics
from harness.store import ResultStore

REPO = Path(__file__).resolve().parents[1]


def make_run_dir(root: Path, run_name: str, samples: list[tuple[int, int, float, list[int]]], *, label: str = "diffusion",
                 model: str = "tiny", eval_name: str = "prompts", sampler: dict | None = None, seed: int = 0,
                 extra_metrics: dict | None = None, trajectory: bool = False) -> Path:
    """A finished run dir: per sample (tokens, nfe, correct, steps per canvas), stored as the eval loop stores it."""
    sampler = dict(sampler or {})
    cap = sampler.get("max_steps")
    store = ResultStore(root / run_name)
    rows = []
    for i, (ntok, nfe, correct, steps) in enumerate(samples):
        traj = None
        if trajectory:
            traj = [{"canvas": c, "step": s, "argmax": [(c + k + (s >= 1) * (k % 2)) % 7 for k in range(8)],
                     "mean_entropy": 1.0 / (s + 1)} for c, n in enumerate(steps) for s in range(n)]
        res = GenerationResult(sample_id=f"q{i}", token_ids=list(range(ntok)), text=f"answer {i} " * 5, nfe=nfe,
                               encoder_forwards=len(steps) + 1, prompt_tokens=12, finished_by="eos", wall_time_s=0.02 * nfe,
                               steps_per_canvas=list(steps), step_cap_hits=sum(1 for s in steps if cap and s >= cap),
                               trajectory=traj)
        row = {**res.to_dict(), "meta": {"bucket": "easy" if i % 2 else "hard"}, "correct": float(correct)}
        store.append(row)
        rows.append(row)
    metrics = {**decode_metrics(rows), "quality": sum(r["correct"] for r in rows) / len(rows), **(extra_metrics or {}),
               "run": {"run_name": run_name, "label": label, "model": model, "eval": eval_name,
                       "sampler": sampler, "seed": seed}}
    store.write_metrics(metrics)
    return root / run_name


def make_sweep(root: Path) -> Path:
    """Three entropy-bound settings of one diffusion model, an AR and an AR+MTP baseline, one unfinished run."""
    sweep = root / "sweeps" / "bound_sweep"
    base = {"name": "entropy_bound", "max_steps": 4, "t_schedule": "linear", "adaptive_stop": True}
    make_run_dir(sweep, "b0.05", [(16, 8, 1, [4, 4]), (16, 6, 1, [3, 3])], sampler={**base, "entropy_bound": 0.05},
                 trajectory=True)
    make_run_dir(sweep, "b0.1", [(16, 4, 1, [2, 2]), (16, 4, 0, [2, 2])], sampler={**base, "entropy_bound": 0.1},
                 extra_metrics={"solved_by_bucket": {"easy": 0.0, "hard": 1.0}})
    make_run_dir(sweep, "b0.5", [(16, 2, 0, [1, 1]), (8, 2, 0, [1, 1])], sampler={**base, "entropy_bound": 0.5})
    make_run_dir(sweep, "ar", [(16, 16, 1, []), (16, 16, 1, [])], label="ar", model="ar-base")
    make_run_dir(sweep, "ar_mtp", [(16, 11, 1, []), (16, 12, 1, [])], label="ar+mtp", model="ar-base")
    ResultStore(sweep / "crashed").append({"sample_id": "q0", "num_tokens": 1, "nfe": 1, "wall_time_s": 0.1})
    return sweep


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


def test_cli(tmp_path):
    sweep = make_sweep(tmp_path)
    out = subprocess.run([sys.executable, "-m", "harness.aggregate", str(sweep), "--out", str(tmp_path / "summary")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "incomplete run" in out.stdout and "crashed" in out.stdout
    table_text = out.stdout.split("\n\n")[0]
    assert all(name in table_text for name in ("b0.05", "b0.1", "b0.5", "ar_mtp"))
    assert "sampler.entropy_bound" in table_text and "ar+mtp" in table_text
    assert "AUP" in out.stdout
    summary = pd.read_csv(tmp_path / "summary" / "summary.csv")
    assert len(summary) == 5
