"""`python -m harness.export --help` lists every format the command writes, each with what it writes, and they are
the formats docs/run_card.md documents (issue 54)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.export.__main__ import FORMATS, export
from tests.helpers.app import REPO, app_env


def documented_formats() -> list[str]:
    """The `format` column of docs/run_card.md's export table."""
    text = (REPO / "docs/run_card.md").read_text(encoding="utf-8")
    table = text[text.index("| format | files |") :].split("\n\n")[0]
    return re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.M)


def test_help_lists_every_documented_format_and_what_it_writes():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.export", "--help"], cwd=REPO, env=app_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    documented = documented_formats()
    assert documented == ["eee", "hf", "d3llm", "parallelbench"] == list(FORMATS)  # the docs and the command agree
    for name in documented:
        assert re.search(rf"^  {name} +{re.escape(FORMATS[name])}$", proc.stdout, flags=re.M), proc.stdout


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_listed_format_is_one_the_command_runs(name, tmp_path):
    """Each format gets past argparse to its own export, which finds no runs in an empty folder."""
    with pytest.raises(SystemExit) as stop:
        export([name, str(tmp_path)])
    assert isinstance(stop.value.code, str) and "no finished" in stop.value.code  # not argparse's exit 2
    with pytest.raises(SystemExit) as bad:
        export(["csv", str(tmp_path)])
    assert bad.value.code == 2
