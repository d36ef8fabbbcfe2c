"""WINO, SlowFast and KLASS against their authors' own generate functions (harness.strategies_check.llada), run
where a folder of the authors' repositories is given (`STRATEGIES_CODE_DIR`: wino/, slowfast/, klass/; never
committed here); `make strategies-check` runs more cases. Without it only the check's own behaviour is tested."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.strategies_check import llada, rule_loop
from harness.strategies_check import llada_checks as strategies_check
from samplers.strategies.klass import KlassConfig

CODE = Path(os.environ.get("STRATEGIES_CODE_DIR", "/nonexistent"))
needs_code = pytest.mark.skipif(not CODE.is_dir(), reason="STRATEGIES_CODE_DIR (the authors' repositories) not set")


@pytest.mark.slow
@needs_code
@pytest.mark.parametrize("strategy,n,blocks", [("wino", 8, (1, 2, 3)), ("slowfast", 8, (1, 2, 3)), ("klass", 3, (1,))])
def test_equals_the_authors_generate(strategy, n, blocks):
    torch.set_num_threads(1)
    for tally in llada.run(strategy, CODE, n=n, seeds=(0,), blocks=blocks):
        assert tally.cases_same == tally.cases > n and tally.steps_same == tally.steps, tally.first_diff
        if strategy == "wino":
            assert tally.remasked > 0  # narrow out ran
        if strategy == "slowfast":
            assert tally.cut > 0  # the fast phase's cut canvas ran


def test_the_check_reports_a_missing_folder_and_fails(tmp_path, capsys):
    assert strategies_check.main(["--code-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert out.count("--code-dir lacks") == len(strategies_check.CHECKS) and "wino/" in out


def test_the_loop_runs_rows_of_different_prompts_in_one_step():
    """Our side of the comparison: rows at their own blocks and steps in one call decode as each does alone."""
    m = llada.tiny_llada(128, 126, 100, seed=3, sharpen=65.0)
    rule = KlassConfig(threshold=0.6, kl_threshold=0.05, steps_per_block=4)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14], [20, 21]]
    with torch.no_grad():
        together = rule_loop.decode(rule, m.model, prompts, 8, 4, 126)
        alone = [rule_loop.decode(rule, m.model, [p], 8, 4, 126)[0] for p in prompts]
    assert [r.x for r in together] == [r.x for r in alone] and [r.trace for r in together] == [r.trace for r in alone]


@pytest.mark.slow
@needs_code
@pytest.mark.parametrize(
    "strategy,blocks", [("klass", (1,)), ("klass", (2, 3)), ("slowfast", (1, 2)), ("wino", (1, 2))]
)
def test_through_the_engine_equals_the_authors_generate(tmp_path, strategy, blocks):
    """Once the engine calls the rule's step: every forward's canvas, the answer, the NFE (KLASS across blocks:
    its history kept; SlowFast: its own block end and the fast phase's cut canvas; WINO: the shadow block)."""
    from dataclasses import fields

    from samplers.masked_rule import MaskedStepIn

    if "plans" not in {f.name for f in fields(MaskedStepIn)}:
        pytest.skip("the engine does not call a rule's step yet")
    torch.set_num_threads(1)
    tally = llada.run_engine(strategy, CODE, tmp_path, n=2, blocks=blocks)
    assert tally.cases_same == tally.cases > 0 and tally.steps_same == tally.steps, tally.first_diff
