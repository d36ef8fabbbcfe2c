"""The Triton kernels compile for Hopper ahead of time, here on the CPU (`bench.gpu.kernel_build`): every launch the
code makes at the released shapes gives a cubin for sm_90 that fits an SM, with no register spills."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.app import REPO

pytest.importorskip("triton")


@pytest.mark.slow
def test_released_launches_compile_for_sm90_without_spills(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the tests' interpreter never compiles
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")  # compiled in this run, not read from an earlier one
    out = tmp_path / "kernels.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu.kernel_build", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["name"].split(" (")[0]: r for r in res["rows"]}
    assert set(rows) == {f"{k} B={b}" for k in ("moe_gate_up", "moe_down", "draw") for b in (1, 32)}
    assert len(res["rows"]) == 8  # the draw with and without the processed-logits write
    for r in res["rows"]:
        assert r["fits"] and r["registers"] <= 255 and r["shared_bytes"] <= 232_448, r
        assert r["local_bytes"] == 0, r  # a spill would make these memory-bound kernels slower still
    # the block rows follow models.kernels.fused_moe.block_rows: 16 pairs per program at batch 1, 64 at batch 32
    assert rows["moe_gate_up B=1"]["constexprs"]["BM"] == 16 and rows["moe_down B=32"]["constexprs"]["BM"] == 64
    assert not rows["moe_gate_up B=1"]["constexprs"]["F32_DOT"]  # the GPU path multiplies bf16 tiles
    # tl.dot runs on tensor cores: Hopper's warpgroup MMA once a block has 64 rows
    assert rows["moe_gate_up B=32"]["mma"] == "wgmma" and rows["moe_down B=1"]["mma"] in ("mma", "wgmma")
    assert "sm_90" in proc.stdout and "moe_gate_up B=1" in proc.stdout
