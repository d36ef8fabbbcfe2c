"""bench.cpu.ar_engine runs end to end (quick sizes, shipped Sudoku checkpoints) and writes every section it reports."""

from __future__ import annotations

import json

import pytest

from bench.cpu import ar_engine

pytestmark = pytest.mark.slow  # decodes real Sudoku puzzles with three shipped checkpoints (~30 s on 2 cores)


def test_ar_engine_bench_quick(tmp_path):
    payload = ar_engine.run(quick=True, out_dir=tmp_path, quiet=True)
    saved = json.loads((tmp_path / "ar_engine.json").read_text())
    assert saved["bench"] == "ar_engine" and "CPU" in saved["note"]
    for key in ("machine", "ar_vs_generate", "varied_length", "draft", "concurrency", "figure", "summary"):
        assert key in saved, key

    # 1. ours vs generate() at 1, 16, 64: identical greedy tokens, positive rates
    rows = saved["ar_vs_generate"]
    assert [r["batch"] for r in rows] == [1, 16, 64]
    for r in rows:
        assert r["same_tokens"] is True, r["batch"]
        assert r["tokens"] > 0 and r["ours_tokens_per_s"] > 0 and r["generate_tokens_per_s"] > 0
        assert r["ratio"] == pytest.approx(r["ours_tokens_per_s"] / r["generate_tokens_per_s"])

    # 2. varied lengths at 64: more requests than rows (refills), lengths actually spread
    v = saved["varied_length"]
    assert v["batch"] == 64 and v["requests"] > 64 and v["same_tokens"] is True
    assert ar_engine.VARIED[0] <= v["mean_length"] <= ar_engine.VARIED[1] and v["tokens"] > 0
    assert v["ratio"] > 0 and 0 < v["ours_row_utilization"] <= 1 and 0 < v["generate_row_utilization"] <= 1

    # 3. batched AR + draft at 1, 4, 16 and transformers' assisted generation at 1: all equal greedy AR
    d = saved["draft"]
    ours = {r["batch"]: r for r in d["rows"] if r["decoder"] == "ours"}
    assert sorted(ours) == [1, 4, 16]
    assert [r["batch"] for r in d["rows"] if r["decoder"] != "ours"] == [1]
    for r in d["rows"]:
        assert r["same_tokens"] is True, (r["decoder"], r["batch"])
        assert r["tokens_per_s"] > 0 and r["tpf"] > 1  # a draft that never helps would give TPF 1
    assert len({r["target_forwards"] for r in ours.values()}) == 1  # batch-invariant: same verify steps
    assert d["ours_b16_over_b1"] > 0 and d["ours_b1_over_assisted_b1"] > 0

    # 4. concurrency: every decoder at every level, and the figure
    conc = saved["concurrency"]
    levels = sorted({r["concurrency"] for r in conc})
    assert len(levels) >= 3
    assert {r["decoder"] for r in conc} == {"AR", f"AR + draft (k={ar_engine.K})", "diffusion"}
    assert len(conc) == 3 * len(levels)
    for r in conc:
        assert r["per_user_tokens_per_s"] > 0 and r["total_tokens_per_s"] > 0 and r["tokens"] > 0
    fig = tmp_path / "ar_engine_scaling.png"
    assert fig.exists() and fig.stat().st_size > 0 and saved["figure"] == str(fig)

    assert {r["bench"] for r in payload["summary"]} == {"ar_engine"}
