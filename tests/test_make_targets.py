"""The documented `make` targets' Python entry points run with their defaults (issue 45: `make search` resolved the
repository one folder short after its module moved, and no test ran it)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from harness.analysis.search_vs_grid import default_dirs, main
from tests.helpers.app import REPO, app_env, compose_app


def make_entry_points() -> list[str]:
    """Every `$(PY) -m <module>` (and `python3 -m <module>`) a Makefile recipe runs."""
    text = (REPO / "Makefile").read_text()
    return sorted(set(re.findall(r"(?:\$\(PY\)|python3) -m ([\w.]+)", text)) - {"pip", "venv", "pytest", "ruff"})


def test_every_make_entry_point_is_a_module():
    mods = make_entry_points()
    assert {"harness.run", "harness.pareto", "harness.analysis.search_vs_grid", "bench.cpu.run_all"} <= set(mods)
    missing = [m for m in mods if importlib.util.find_spec(m) is None]
    assert not missing, missing


def test_make_search_finds_the_sweeps_where_harness_run_writes_them(tmp_path):
    """`make search`'s defaults: the search's and the grid's sweep dirs as `python -m harness.run` composes them."""
    out = compose_app("experiment=sudoku_search").paths.output_dir
    dirs = default_dirs([])
    assert dirs["search"] == REPO / out / "sweeps" / "sudoku_search" and dirs["grid"].name == "sudoku_sweep"
    assert str(dirs["search"]).startswith(str(REPO)) and "harness/outputs" not in str(dirs["search"])
    (tmp_path / "sweeps" / "sudoku_search").mkdir(parents=True)
    with pytest.raises(SystemExit, match=f"no finished diffusion runs under {tmp_path}/sweeps/sudoku_search"):
        main(["--skip-run", f"paths.output_dir={tmp_path}"])  # the comparison after the search, on an empty tree


@pytest.mark.slow  # one interpreter start per entry point (~2 s each)
@pytest.mark.parametrize("module", make_entry_points())
def test_make_entry_point_starts(module):
    """`python -m <module> --help`: each entry point imports and parses its arguments (none runs its work)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
