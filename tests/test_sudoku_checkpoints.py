"""The shipped 6x6 checkpoints load offline and actually solve held-out puzzles (regression guard)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evals.sudoku.check import check

pytestmark = pytest.mark.slow  # each decodes puzzles with a shipped checkpoint (~10-30 s on 2 cores)
CKPT = Path(__file__).resolve().parents[1] / "models" / "checkpoints"  # from any working directory; shipped in git


def test_diffusion_checkpoint_solves_held_out_puzzles():
    torch.set_num_threads(1)
    m = check(str(CKPT / "sudoku6_diffusion"), limit=20, batch_size=20)
    assert m["n"] == 20 and m["solved_rate"] >= 0.8 and m["tpf"] > 4 and m["parse_failures"] == 0


def test_ar_checkpoint_decodes_grids():
    torch.set_num_threads(1)
    m = check(str(CKPT / "sudoku6_ar"), limit=10, batch_size=10)
    assert m["tpf"] == 1.0 and m["blank_accuracy"] > 0.4  # far above chance (1/6) on blank cells
