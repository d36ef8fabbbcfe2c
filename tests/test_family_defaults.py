"""Every family runs with its defaults (issue 45): a model config carries its family's default sampler, `fam=` works as
typed, and a masked model runs from the CLI with no sampler named, `batch_size=auto` included."""

from __future__ import annotations

import json

import pytest

from harness.runner.configs import check_model_path
from harness.runner.plan import decoder_plan
from samplers.masked import FAMILY
from tests.helpers.app import compose_app, run_app

# model -> the sampler its config carries (conf/model/*.yaml defaults; docs/masked.md says why each)
MASKED_DEFAULTS = {
    "sudoku6_masked": "block_refinement",
    "tiny_masked": "block_refinement",
    "llada2_mini": "llada2_editing",  # its own generate's rule at its Quality mode (threshold 0.7, editing 0.5)
    "sdar": "block_refinement",  # conf/sampler/sdar_dynamic (threshold 0.85, 4 steps)
    "llada_8b_instruct": "low_confidence",
    "dream": "low_confidence",
}


@pytest.mark.parametrize("model", sorted(MASKED_DEFAULTS))
def test_masked_model_carries_its_sampler(model):
    extra = ["model.torch_fallbacks=[flash_attn]"] if model == "sdar" else []  # flash_attn is not on a CPU machine
    cfg = compose_app(f"model={model}", *extra)
    assert cfg.sampler.name == MASKED_DEFAULTS[model] and cfg.sampler.family == FAMILY
    decoder_plan(cfg.model, cfg.sampler)  # not refused: reads no weights (a hub model's config is not read)


def test_checkpoint_samplers_are_their_own_routines():
    llada2 = compose_app("model=llada2_mini", "eval=gpqa").sampler
    assert (llada2.threshold, llada2.editing_threshold, llada2.max_post_steps, llada2.steps_per_block) == (
        0.7, 0.5, 16, 32,
    )  # fmt: skip
    sdar = compose_app("model=sdar").sampler
    assert (sdar.threshold, sdar.steps_per_block, sdar.editing_threshold) == (0.85, 4, None)


def test_explicit_sampler_wins_and_a_wrong_family_is_still_refused():
    assert compose_app("model=sudoku6_masked", "sampler=remdm").sampler.name == "remdm"
    assert compose_app("model=llada2_mini", "sampler=low_confidence").sampler.name == "low_confidence"
    cfg = compose_app("model=sudoku6_masked", "sampler=entropy_bound")
    check_model_path(cfg.model)
    with pytest.raises(ValueError, match="uniform-state sampler on a masked model"):
        decoder_plan(cfg.model, cfg.sampler)
    assert compose_app("model=sudoku6_diffusion").sampler.name == "entropy_bound"  # the other families unchanged


@pytest.mark.parametrize(
    "overrides,model,sampler",
    [
        (["fam=llada2_mini", "eval=gpqa"], "llada2_mini", "block_refinement"),
        (["fam=sdar"], "sdar", "low_confidence"),
        (["experiment=sudoku_families", "fam=masked_low_confidence"], "sudoku6_masked", "low_confidence"),
        (["experiment=sudoku_families", "fam=ar"], "sudoku6_ar", "entropy_bound"),
        (["experiment=sudoku_families"], "sudoku6_diffusion", "entropy_bound"),  # its default option
        (["experiment=report_families"], "diffusiongemma_26b", "entropy_bound"),
        (["experiment=twin/report_families", "fam=tiny_masked"], "tiny_masked", "block_refinement"),
    ],
)
def test_fam_as_users_type_it(overrides, model, sampler):
    cfg = compose_app(*overrides)
    assert (cfg.model.name, cfg.sampler.name) == (model, sampler)


def test_sudoku_families_budget_reaches_the_fam_option():
    cfg = compose_app("experiment=sudoku_families", "fam=masked_refine_t07", "budget=8")
    got = (cfg.sampler.threshold, cfg.sampler.steps_per_block, cfg.eval.name, cfg.batch_size)
    assert got == (0.7, 8, "sudoku6", 100)


@pytest.mark.slow  # two real `python -m harness.run` subprocesses on the shipped masked checkpoint (~20 s)
def test_sudoku6_masked_runs_with_its_defaults(tmp_path):
    """`python -m harness.run model=sudoku6_masked eval=sudoku6 [batch_size=auto]`: no sampler named, it decodes
    with block refinement; `auto` picks a batch from the masked memory estimate (all 12 puzzles fit)."""
    for extra in ([], ["batch_size=auto"]):
        out = tmp_path / ("auto" if extra else "default")
        run_app("model=sudoku6_masked", "eval=sudoku6", "eval.num_puzzles=12", f"hydra.run.dir={out}", *extra)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["run"]["label"] == "masked" and metrics["run"]["sampler"]["name"] == "block_refinement"
        assert metrics["batch_size"] == (12 if extra else 8) and metrics["quality"] > 0.5
