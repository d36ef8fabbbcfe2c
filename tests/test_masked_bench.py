"""bench.cpu.masked_bench --quick: it checks token identity with LLaDA2Pipeline before timing, and writes its rows."""

from __future__ import annotations

import json

from bench.cpu import masked_bench


def test_quick_bench_runs_and_matches_the_pipeline(tmp_path):
    payload = masked_bench.run(quick=True, out_dir=tmp_path, quiet=True)
    rows = json.loads((tmp_path / "masked_bench.json").read_text())["rows"]
    assert [r["batch"] for r in rows] == list(masked_bench.QUICK["batches"]) == [r["batch"] for r in payload["rows"]]
    for r in rows:
        assert r["prompts"] == masked_bench.QUICK["prompts"] > max(masked_bench.QUICK["batches"])  # rows refilled
        assert r["identical_tokens"] and r["ours_row_forwards"] <= r["pipeline_row_forwards"]
        assert r["ours_s"] > 0 and r["pipeline_s"] > 0
    sc = payload["ours_scaling"]
    assert (sc["batch"], sc["vs_batch"]) == (max(masked_bench.QUICK["batches"]), min(masked_bench.QUICK["batches"]))
    assert sc["ratio_of_medians"] > 0 and sc["median_round_ratio"] > 0
