"""The run card (harness.runner.run_card): every run records where it decoded and what shaped its prompts; a resume
under another environment is refused naming the field unless `resume_across_env=true`; the summary tells the
environments apart (harness.analysis.environments)."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.runner.run_card import RUN_CARD, read_card
from tests.helpers.app import compose_app


@pytest.fixture
def app(tmp_path, tiny_diffusion_dir):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    args = [f"model.path={tiny_diffusion_dir}", f"eval.path={prompts}", "eval.max_new_tokens=8", "sampler.max_steps=2"]
    return tmp_path, args


def _run(args, run_dir):
    from harness.run import run

    return run(compose_app(*args), run_dir)


def _edit_card(run_dir, **env):
    card = json.loads((run_dir / RUN_CARD).read_text())
    card["environment"].update(env)
    (run_dir / RUN_CARD).write_text(json.dumps(card))


def _half_done(run_dir):
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    (run_dir / "samples.jsonl").write_text("\n".join(lines[:2]) + "\n")  # killed half way
    (run_dir / "metrics.json").unlink()


def test_a_run_records_its_environment_and_prompts(app):
    import torch
    import transformers

    tmp, args = app
    _run(args, tmp / "run")
    card = read_card(tmp / "run")
    env = card["environment"]
    assert env["torch"] == torch.__version__ and env["transformers"] == transformers.__version__
    assert env["device"].startswith("cpu") and env["device_count"] == 1 and env["cuda"] is None
    assert env["dtype"] == "float32"  # as loaded, not as asked
    assert env["attention"]  # the backend the loaded config names
    assert env["compile"] == "false" and len(env["git_commit"]) == 40 and isinstance(env["git_dirty"], bool)
    prompts = card["prompts"]
    assert len(prompts["eval_config"]) == 16 and prompts["system_prompt"] is None and prompts["fewshot"] is None
    assert card["earlier_environments"] == []


def test_a_resume_under_another_environment_is_refused_naming_the_field(app):
    tmp, args = app
    run_dir = tmp / "run"
    _run(args, run_dir)
    _half_done(run_dir)
    _edit_card(run_dir, torch="2.0.0", dtype="bfloat16")  # the first half decoded under another torch, in bf16
    with pytest.raises(RuntimeError, match=r"another environment \(torch: '2\.0\.0' -> .*resume_across_env=true"):
        _run(args, run_dir)
    assert len((run_dir / "samples.jsonl").read_text().splitlines()) == 2  # nothing was mixed in
    import torch

    _edit_card(run_dir, torch=torch.__version__)  # the same torch again: the dtype still differs
    with pytest.raises(RuntimeError, match=r"dtype: 'bfloat16' -> 'float32'"):  # known once the model has loaded
        _run(args, run_dir)
    metrics = _run([*args, "resume_across_env=true"], run_dir)  # the user says it may
    assert metrics["num_samples"] == 4
    card = read_card(run_dir)
    assert [e["dtype"] for e in card["earlier_environments"]] == ["bfloat16"]
    assert card["environment"]["dtype"] == "float32"


def test_resume_across_env_must_be_a_boolean(app):
    tmp, args = app
    with pytest.raises(ValueError, match="resume_across_env: must be true or false"):
        _run([*args, "resume_across_env=maybe"], tmp / "run")


def test_the_summary_shows_both_environments(app, capsys):
    from harness.analysis.aggregate import collect, print_summary
    from harness.analysis.fronts import annotate_fronts

    tmp, args = app
    sweep = tmp / "sweep"
    _run(args, sweep / "run")
    shutil.copytree(sweep / "run", sweep / "run_elsewhere")  # the same config, decoded on another machine
    _edit_card(sweep / "run_elsewhere", device="NVIDIA A100-SXM4-80GB", torch="2.0.0")
    table = collect([sweep])
    assert table["model_name"].tolist() == ["tiny_diffusion"] * 2
    labels = sorted(table["model"])
    assert labels[0].startswith("tiny_diffusion [device=NVIDIA A100-SXM4-80GB, torch=2.0.0]")
    assert labels[1].startswith("tiny_diffusion [device=cpu")
    table, fronts = annotate_fronts(table)
    assert len(fronts) == 2  # one front per environment, not one mixing both
    print_summary(table, fronts)
    out = capsys.readouterr().out
    assert "more than one environment" in out
    assert "tiny_diffusion [device=NVIDIA A100-SXM4-80GB, torch=2.0.0]: 1 run(s)" in out


def test_one_environment_per_model_leaves_the_table_as_it_was(app):
    """Other models differ in dtype or attention backend by design: only one model's runs are compared."""
    from harness.analysis.aggregate import collect

    tmp, args = app
    sweep = tmp / "sweep"
    _run(args, sweep / "run")
    assert collect([sweep])["model"].tolist() == ["tiny_diffusion"]
    shutil.copytree(sweep / "run", sweep / "other_model")
    _edit_card(sweep / "other_model", attention="eager", dtype="bfloat16")
    metrics = json.loads((sweep / "other_model" / "metrics.json").read_text())
    metrics["run"]["model"] = "tiny_other"
    (sweep / "other_model" / "metrics.json").write_text(json.dumps(metrics))
    assert sorted(collect([sweep])["model"]) == ["tiny_diffusion", "tiny_other"]
