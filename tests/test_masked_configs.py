"""The masked family through the real Hydra app: bad combinations fail before any model loads, naming the key;
every masked sampler runs end to end on the tiny masked twin and its runs form their own series."""

from __future__ import annotations

import json
import shutil

import pytest
from hydra.utils import instantiate

from harness.runner.configs import check_model_path
from harness.runner.plan import decoder_plan
from models.tiny import build_masked
from samplers.config import SamplerConfigError
from samplers.masked import MASKED_SAMPLERS
from tests.helpers.app import compose_app, run_app


@pytest.fixture(scope="module")
def masked_dir(tmp_path_factory):
    return build_masked(tmp_path_factory.mktemp("tiny_masked"), block_length=8)


@pytest.fixture(scope="module")
def weightless(masked_dir, tmp_path_factory):
    """The tiny checkpoint's config and tokenizer without its weights: a run that got as far as loading fails
    loudly, so an error naming a config key shows the check ran first."""
    out = tmp_path_factory.mktemp("weightless")
    for f in masked_dir.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    return out


def _check(*overrides):
    cfg = compose_app(*overrides)
    check_model_path(cfg.model)
    decoder_plan(cfg.model, cfg.sampler)
    return instantiate(cfg.sampler)


def test_masked_samplers_are_in_the_sampler_group(masked_dir):
    for name in MASKED_SAMPLERS:
        assert _check("model=tiny_masked", f"model.path={masked_dir}", f"sampler={name}").name == name


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model=tiny_masked", "sampler=entropy_bound"], "uniform-state sampler on a masked model"),
        (["model=tiny_diffusion", "sampler=block_refinement"], "masked sampler on a diffusion model"),
        (["model=tiny_masked", "sampler=block_refinement", "sampler.block_length=3"], "sampler.block_length"),
        (["model=tiny_masked", "sampler=low_confidence", "model.context=prefix_cache"], "model.context"),
        (["model=tiny_masked", "sampler=fast_dllm_masked", "model.attention=bidirectional"], "context=cache is exact"),
        (["model=tiny_masked", "sampler=remdm", "model.shifted_logits=true"], "model.shifted_logits"),
        (["model=llada2_mini", "sampler=block_refinement", "model.mask_token_id=null"], "model.mask_token_id"),
        (["model=tiny_masked", "sampler=block_refinement", "+model.mask_form=float"], "model.mask_form"),
        (["model=sdar", "sampler=block_refinement", "+model.forward_kwargs.position_ids=0"], "model.forward_kwargs"),
    ],
)
def test_bad_combinations_fail_before_loading(weightless, overrides, match):
    hub = "model=llada2_mini" in overrides or "model=sdar" in overrides
    path = [] if hub else [f"model.path={weightless}"]
    if "model=tiny_diffusion" in overrides:
        path = []
    cfg = compose_app(*overrides, *path)
    if not hub:
        check_model_path(cfg.model)
    with pytest.raises(ValueError, match=match):
        decoder_plan(cfg.model, cfg.sampler)


def test_no_mask_id_anywhere_fails(weightless, tmp_path):
    for f in weightless.iterdir():
        shutil.copy(f, tmp_path / f.name)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.pop("mask_token_id")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tok = json.loads((tmp_path / "tokenizer_config.json").read_text())
    tok.pop("mask_token", None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match="model.mask_token_id"):
        cfg = compose_app("model=tiny_masked", f"model.path={tmp_path}", "sampler=low_confidence")
        decoder_plan(cfg.model, cfg.sampler)


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_threshold_outside_unit_interval_fails_at_instantiation(masked_dir, value):
    with pytest.raises(Exception, match="sampler.threshold: must be null or in") as e:  # Hydra wraps it
        _check(
            "model=tiny_masked", f"model.path={masked_dir}", "sampler=block_refinement", f"sampler.threshold={value}"
        )
    assert isinstance(e.value.__cause__, SamplerConfigError)


def test_app_refuses_before_loading(weightless, tmp_path):
    proc = run_app(
        "model=tiny_masked",
        f"model.path={weightless}",
        "sampler=entropy_bound",
        f"hydra.run.dir={tmp_path}",
        check=False,
    )
    assert proc.returncode != 0 and "uniform-state sampler on a masked model" in proc.stderr


@pytest.mark.slow  # a real multirun of four samplers (subprocess): ~18 s
def test_every_masked_sampler_runs_end_to_end(masked_dir, tmp_path):
    """`python -m harness.run -m model=tiny_masked eval=prompts sampler=...`: each run records the masked label,
    its sampler's knobs and TPF by the one rule; the sweep summary lists them as the `masked` series."""
    names = ",".join(MASKED_SAMPLERS)
    run_app(
        "-m", "model=tiny_masked", f"model.path={masked_dir}", "eval=prompts", f"sampler={names}",
        f"hydra.sweep.dir={tmp_path}", "eval.max_new_tokens=16", timeout=600,
    )  # fmt: skip
    metrics = [json.loads(p.read_text()) for p in tmp_path.rglob("metrics.json")]
    assert sorted(m["run"]["sampler"]["name"] for m in metrics) == sorted(MASKED_SAMPLERS)
    for m in metrics:
        assert m["run"]["label"] == "masked"
        assert m["run"]["decoder"]["context"] == "cache"
        assert m["tpf"] == pytest.approx(m["num_tokens"] / m["nfe"])
    proc = run_app_pareto(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count(" masked ") >= len(MASKED_SAMPLERS)


def run_app_pareto(sweep_dir):
    import subprocess
    import sys

    from tests.helpers.app import REPO, app_env

    cmd = [sys.executable, "-m", "harness.pareto", str(sweep_dir)]
    return subprocess.run(cmd, cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=300)
