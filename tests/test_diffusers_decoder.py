"""`decoder=diffusers`: diffusers' DiffusionGemmaPipeline and its schedulers decode through the harness.

Fast: the sampler configs match the real diffusers signatures and refuse bad values naming the key; Hydra composes
the decoder group; a mismatched decoder / sampler / model fails before any model loads. Slow (the shipped 6x6
model): forwards counted from the step callback equal the model's forwards (corrector sweeps included); the
pipeline's solved rate and TPF lie within our engine's intervals at the checkpoint's sampler, and the reverse; a
real `python -m harness.run -m` sweep over corrector_steps lands on the same front as our sampler.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from samplers.config import SamplerConfigError
from samplers.diffusers_config import (
    CORRECTOR_SELECTIONS,
    DIFFUSERS_SAMPLERS,
    DiffusersBlockRefinementConfig,
    DiffusersDDIMConfig,
    DiffusersEntropyBoundConfig,
)

REPO = Path(__file__).resolve().parents[1]
diffusers = pytest.importorskip("diffusers")


# ---- configs -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", DIFFUSERS_SAMPLERS, ids=lambda c: c.name)
def test_knobs_are_the_real_scheduler_and_pipeline_arguments(cls):
    """Every knob reaches diffusers under its own name (a renamed argument there fails here)."""
    cfg = cls()
    scheduler = getattr(diffusers, cfg.scheduler)
    assert set(cfg.scheduler_config()) <= set(inspect.signature(scheduler.__init__).parameters)
    assert set(cfg.call_kwargs()) <= set(inspect.signature(diffusers.DiffusionGemmaPipeline.__call__).parameters)
    defaults = {k: p.default for k, p in inspect.signature(scheduler.__init__).parameters.items()}
    assert {k: defaults[k] for k in cfg.scheduler_config()} == cfg.scheduler_config()  # diffusers' own defaults
    knobs = set(cfg.knobs()) - {"name"}
    assert knobs == set(cfg.scheduler_config()) | set(cfg.call_kwargs())  # nothing recorded that is not passed


@pytest.mark.parametrize("selection", CORRECTOR_SELECTIONS)
def test_each_corrector_selection_runs_in_diffusers(selection):
    sched = diffusers.DiscreteDDIMScheduler(**DiffusersDDIMConfig(corrector_selection=selection).scheduler_config())
    sched.set_timesteps(8)
    logits, sample = torch.randn(2, 6, 11), torch.randint(0, 11, (2, 6))
    out = sched.step_correct(logits, 3, sample, generator=torch.Generator().manual_seed(0))
    assert out.prev_sample.shape == sample.shape and (out.prev_sample != sample).sum() <= 2  # corrector_k=1 per row


@pytest.mark.parametrize(
    "cls, knobs, key",
    [
        (DiffusersEntropyBoundConfig, {"entropy_bound": 0}, "entropy_bound"),
        (DiffusersEntropyBoundConfig, {"t_min": 0.9}, "t_max"),
        (DiffusersEntropyBoundConfig, {"num_inference_steps": 0}, "num_inference_steps"),
        (DiffusersEntropyBoundConfig, {"stability_threshold": 0}, "stability_threshold"),
        (DiffusersEntropyBoundConfig, {"confidence_threshold": -1.0}, "confidence_threshold"),
        (DiffusersEntropyBoundConfig, {"cache_implementation": "dynamic"}, "cache_implementation"),
        (DiffusersBlockRefinementConfig, {"threshold": 1.5}, "threshold"),
        (DiffusersBlockRefinementConfig, {"editing_threshold": 0.0}, "editing_threshold"),
        (DiffusersDDIMConfig, {"corrector_steps": -1}, "corrector_steps"),
        (DiffusersDDIMConfig, {"corrector_steps": 4, "num_inference_steps": 5}, "corrector_steps"),
        (DiffusersDDIMConfig, {"corrector_selection": "best"}, "corrector_selection"),
        (DiffusersDDIMConfig, {"corrector_k": 0}, "corrector_k"),
        (DiffusersDDIMConfig, {"temperature": "hot"}, "temperature"),
    ],
)
def test_bad_knobs_name_the_key(cls, knobs, key):
    with pytest.raises(SamplerConfigError, match=f"sampler.{key}:"):
        cls(**knobs)


def test_corrector_sweeps_fold_into_the_forward_budget():
    """The pipeline's split: the first (N - 1) // (1 + c) predictor steps run c sweeps each; N forwards in all."""
    cfg = DiffusersDDIMConfig(corrector_steps=2, num_inference_steps=48)
    assert cfg.corrected_steps == 15 and cfg.predictor_steps == 18
    assert sum(cfg.forwards_at(s) for s in range(cfg.predictor_steps)) == 48


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    from harness.runner.configs import register_configs

    register_configs()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=["model=sudoku6_diffusion", "eval=sudoku6", *overrides])


def test_decoder_group_picks_the_pipeline_and_its_default_scheduler():
    cfg = _compose("decoder=diffusers")
    assert cfg.decoder.name == "diffusers" and cfg.sampler.name == "diffusers_entropy_bound"
    cfg = _compose("decoder=diffusers", "sampler=diffusers_ddim", "sampler.corrector_steps=1")
    assert cfg.sampler.name == "diffusers_ddim" and "diffusers_ddim-cs1" in cfg.run_name
    assert _compose().decoder.name == "engine" and _compose().sampler.name == "entropy_bound"


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["sampler=diffusers_ddim"], "add decoder=diffusers"),
        (["decoder=diffusers", "sampler=entropy_bound"], "sampler=diffusers_entropy_bound"),
        (["decoder=diffusers", "sampler=diffusers_ddim", "sampler.corrector_selection=best"], "corrector_selection"),
        (["decoder=diffusers", "sampler=diffusers_ddim", "sampler.corrector_k=0"], "sampler.corrector_k"),
        # an AR model: its family takes token samplers, none of them diffusers' (refused naming the sampler)
        (["decoder=diffusers", "model=sudoku6_ar"], "uniform-state sampler on a ar model"),
        (["decoder=diffusers", "model=sudoku6_ar", "sampler=token"], "sampler=token decodes on decoder=engine"),
        (["decoder=diffusers", "model.compile=true"], "model.compile"),
    ],
)
def test_bad_decoder_configs_fail_before_any_model_loads(overrides, match, tmp_path, monkeypatch):
    from hydra.errors import InstantiationException

    import models.diffusion_gemma
    from harness.run import run

    def loaded(*a, **k):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(models.diffusion_gemma.DiffusionGemmaForBlockDiffusion, "from_pretrained", loaded)
    with pytest.raises((ValueError, InstantiationException), match=match):  # Hydra wraps a sampler's error
        run(_compose(*overrides), tmp_path / "run")


def test_the_run_identity_names_the_diffusers_release():
    from importlib.metadata import version

    from harness.runner.identity import decoder_identity

    assert decoder_identity(_compose("decoder=diffusers").decoder) == {"decoder.diffusers": version("diffusers")}
    assert decoder_identity(_compose().decoder) == {}


# ---- the shipped model -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    from bench.cpu.diffusers_bench import load

    torch.set_num_threads(1)
    return load()


@pytest.mark.slow
def test_step_callback_counts_every_forward_corrector_sweeps_included(shipped):
    from harness.engine.decoders import decoder_for
    from harness.runner.evaluate import requests_for

    ev, decoders = shipped
    adapter = decoders["engine"].model
    dec = decoder_for(adapter, DiffusersDDIMConfig(corrector_steps=1, num_inference_steps=12))
    calls = []
    hook = adapter.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        results = dec.generate(requests_for(ev, dec, ev.items()[:4], seed=0))
    finally:
        hook.remove()
    assert all(r.row_forwards == len(calls) for r in results)  # one canvas: every row saw every forward
    assert all(0 < r.nfe <= r.row_forwards and r.encoder_forwards == 1 for r in results)
    assert sum(r.steps_per_canvas[0] for r in results) >= 4 and all(r.num_tokens == 36 for r in results)


@pytest.mark.slow
def test_pipeline_lands_within_the_engines_intervals_at_the_checkpoints_sampler(shipped):
    """48 held-out puzzles, batch 16, entropy bound b=0.1 / 48 steps / T 0.8->0.4 / adaptive stop on both."""
    from bench.cpu.diffusers_bench import side_by_side

    ev, decoders = shipped
    figs = side_by_side(ev, decoders, n=48, batch_size=16)
    ours, theirs = figs["engine"], figs["diffusers"]
    print(json.dumps(figs, indent=1))
    for a, b in ((ours, theirs), (theirs, ours)):
        lo, hi = a["solved_interval"]
        assert lo <= b["solved_rate"] <= hi
        lo, hi = a["tpf_interval"]
        assert lo <= b["tpf"] <= hi
    assert theirs["solved_rate"] >= 0.8 and theirs["tpf"] > 4  # and both actually solve puzzles


@pytest.mark.slow
def test_a_corrector_sweep_lands_on_the_front_with_our_sampler(tmp_path):
    """The command of the README, on 6 puzzles: two diffusers_ddim runs and one of ours, one front."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    common = ["model=sudoku6_diffusion", "eval=sudoku6", "eval.limit=6", "batch_size=6", f"paths.output_dir={tmp_path}"]
    runs = [
        ["-m", *common, "decoder=diffusers", "sampler=diffusers_ddim", "sampler.corrector_steps=0,1", "sweep_name=s"],
        ["-m", *common, "sweep_name=s"],
    ]
    for args in runs:
        proc = subprocess.run(
            [sys.executable, "-m", "harness.run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    from harness.analysis.aggregate import collect

    table = collect([tmp_path / "sweeps" / "s"])
    assert sorted(table["sampler"]) == ["diffusers_ddim", "diffusers_ddim", "entropy_bound"]
    assert table["eval"].nunique() == 1  # the same items: one front
    assert set(table["decoder.implementation"].fillna("engine")) == {"diffusers", "engine"}
    assert (table["nfe"] > 0).all() and table["consistent"].all()
