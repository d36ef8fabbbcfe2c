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
        (["experiment=sudoku_families", "fam=ar"], "sudoku6_ar", "token"),  # the AR token rule
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


AR_MODELS = (
    "tiny_ar", "tiny_ar_draft", "sudoku6_ar", "sudoku6_ar_draft", "gemma4_ar", "gemma4_ar_mtp",
    "gemma4_ar_sudoku_lora", "diffusiongemma_26b_ar", "nemotron_diffusion_8b_ar", "sudoku6_diffusion_ar",
)  # fmt: skip


@pytest.mark.parametrize("model", AR_MODELS)
def test_ar_models_carry_the_token_rule(model):
    """Every AR model config names its family's sampler, the token rule (issue 52): greedy unless do_sample."""
    cfg = compose_app(f"model={model}")
    assert (cfg.sampler.name, cfg.sampler.family, cfg.sampler.do_sample) == ("token", "token", False)
    assert "do_sample" not in cfg.model and "temperature" not in cfg.model  # the knobs are the sampler's
    assert decoder_plan(cfg.model, cfg.sampler).family.sampler_group == "token"


def test_a_diffusion_sampler_on_an_ar_model_and_a_bad_token_knob_fail_before_loading():
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    cfg = compose_app("model=tiny_ar", "sampler=entropy_bound")
    with pytest.raises(ValueError, match="uniform-state sampler on a ar model"):
        decoder_plan(cfg.model, cfg.sampler)
    with pytest.raises(InstantiationException, match="sampler.temperature: sampling needs temperature > 0"):
        instantiate(compose_app("model=tiny_ar", "sampler.do_sample=true", "sampler.temperature=0").sampler)


@pytest.mark.slow  # a real `python -m harness.run` subprocess on the tiny AR model (~10 s)
def test_an_ar_run_records_its_token_rule(tmp_path):
    """config.yaml and metrics.json's `run.sampler` record the AR run's token rule, not `sampler: null`."""
    from omegaconf import OmegaConf

    run_app("model=tiny_ar", "eval=prompts", "sampler.do_sample=true", "sampler.top_k=5", f"hydra.run.dir={tmp_path}")
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert (saved.sampler.name, saved.sampler.do_sample, saved.sampler.top_k) == ("token", True, 5)
    run = json.loads((tmp_path / "metrics.json").read_text())["run"]
    assert run["label"] == "ar" and run["sampler"]["top_k"] == 5 and run["decoder"]["top_k"] == 5
