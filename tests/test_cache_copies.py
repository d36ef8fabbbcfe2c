"""bench.cpu.cache_copies on its quick setting: real-shaped K/V slots, a real commit and admission through the adapter,
every aten op watched. What the engine's cache maintenance writes is exactly the new K/V, and nothing is copied."""

import json

import pytest

from bench.cpu import cache_copies


@pytest.mark.slow
def test_commits_and_admissions_write_only_the_new_kv_and_copy_nothing(tmp_path):
    payload = cache_copies.run(quick=True, out_dir=tmp_path, quiet=True)
    assert json.loads((tmp_path / "cache_copies.json").read_text())["events"] == payload["events"]
    events = payload["events"]
    assert [e["event"].split(" (")[0] for e in events] == ["commit k=1", "commit k=6", "admission"]
    for e in events:
        assert e["written_bytes"] == e["new_kv_bytes"] > 0, e["event"]
        assert e["copied_bytes"] == 0, (e["event"], e["copy_ops"])
        assert e["before_copied_per_new"] > 2  # what the right-aligned cache copied, for comparison
        assert e["gqa_expand_bytes"] == 0  # grouped heads stacked along the queries: no repeat_kv copy of the slots
