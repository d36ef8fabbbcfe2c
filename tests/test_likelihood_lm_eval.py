"""lm-eval likelihood tasks end to end (issue 47): `eval=lm_eval` through real Hydra and `harness.run` for every family
on tiny models, resumed without rescoring; a sweep of decoding knobs over them refused before any job; lm-eval's own
command line on our engine. Tasks are offline stand-ins of lm-eval's own (tests/helpers/likelihood_tasks.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.app import app_env
from tests.helpers.likelihood_tasks import BUILTIN, write_tasks

REPO = Path(__file__).resolve().parents[1]
FAMILY_METHOD = {"tiny_ar": "exact", "tiny_masked": "mc_elbo", "tiny_diffusion": "decision_read"}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    return folder, write_tasks(folder)


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory):
    from models.tiny import build_ar, build_diffusion, build_masked

    root = tmp_path_factory.mktemp("models")
    return {
        "tiny_ar": build_ar(root / "ar"),
        "tiny_masked": build_masked(root / "masked", block_length=4),
        "tiny_diffusion": build_diffusion(root / "diffusion", canvas_length=8),
    }


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from harness.runner.configs import register_configs

    register_configs()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def lm_eval_overrides(folder: Path, names: list[str], limit: int = 2) -> list[str]:
    return [
        "eval=lm_eval", f"eval.tasks=[{','.join(names)}]", f"eval.include_path=[{folder}]",
        "eval.include_defaults=false", f"eval.limit={limit}", "eval.apply_chat_template=false",
        "eval.likelihood.mc_num=8",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(FAMILY_METHOD))
def test_arc_and_hellaswag_run_and_resume_for_every_family(model, model_paths, tasks, tmp_path, caplog):
    from harness.run import run

    folder, _ = tasks
    cfg = compose(f"model={model}", f"model.path={model_paths[model]}", *lm_eval_overrides(
        folder, ["dg_arc_challenge", "dg_hellaswag"]))  # fmt: skip
    with caplog.at_level("INFO"):
        first = run(cfg, tmp_path / "run")
    assert first["likelihood"]["method"] == FAMILY_METHOD[model] and first["sampler_used"] is False
    assert "likelihood scoring" in caplog.text and "unused" in caplog.text  # the run says which knobs scoring used
    assert first["likelihood_requests"] == 16  # 2 questions x 4 choices x 2 tasks
    rows = [json.loads(s) for s in (tmp_path / "run" / "samples_scored.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["choices"]) == 4 and r["request"] == "loglikelihood" for r in rows)
    assert all(c["forwards"] >= 1 and c["logprob"] < 0 for r in rows for c in r["choices"])
    log = tmp_path / "run" / "samples.jsonl"
    stored = log.read_text()
    again = run(cfg, tmp_path / "run")  # resume: every request is stored, nothing is scored again
    assert log.read_text() == stored
    assert again["lm_eval"] == first["lm_eval"]


@pytest.mark.slow
def test_all_six_likelihood_tasks_run(model_paths, tasks, tmp_path):
    from harness.run import run

    folder, names = tasks
    cfg = compose("model=tiny_masked", f"model.path={model_paths['tiny_masked']}", *lm_eval_overrides(folder, names))
    metrics = run(cfg, tmp_path / "run")
    assert set(metrics["lm_eval"]) == {f"dg_{t}" for t in BUILTIN}
    assert metrics["likelihood_mean_stderr"] > 0  # masked: Monte-Carlo estimates with their standard errors


def test_task_types_of_lm_evals_own_tasks():
    from evals.lmeval.task_types import likelihood_only, output_types

    types = output_types(["arc_challenge", "mmlu", "gpqa_main_n_shot", "gsm8k", "no_such_task"])
    assert types["arc_challenge"] == {"arc_challenge": "multiple_choice"}
    assert len(types["mmlu"]) == 57 and set(types["mmlu"].values()) == {"multiple_choice"}
    assert types["gsm8k"] == {"gsm8k": "generate_until"} and types["no_such_task"] == {}
    assert likelihood_only(["hellaswag", "gsm8k", "piqa", "winogrande"]) == ["hellaswag", "piqa", "winogrande"]


def sweep_cfg(tasks: list[str], include: list[str], *overrides: str):
    return OmegaConf.create({
        "eval": {"_target_": "evals.lmeval.LmEvalEval", "tasks": tasks, "include_path": include,
                 "include_defaults": False},
        "hydra": {"overrides": {"task": list(overrides)}},
    })  # fmt: skip


def test_sweep_check_names_knob_and_task(tasks):
    from harness.runner.knob_guard import check_likelihood_sweep

    folder, _ = tasks
    with pytest.raises(ValueError, match=r"sampler\.threshold.*dg_piqa"):
        check_likelihood_sweep(sweep_cfg(["dg_piqa"], [str(folder)], "sampler.threshold=0.5,0.9", "seed=1"))
    with pytest.raises(ValueError, match=r"sampler.*dg_arc_challenge"):
        check_likelihood_sweep(sweep_cfg(["dg_arc_challenge"], [str(folder)], "sampler=a,b"))
    # not refused: a swept scoring knob, a task that generates, one fixed sampler knob
    check_likelihood_sweep(sweep_cfg(["dg_piqa"], [str(folder)], "eval.likelihood.mc_num=8,128"))
    echo = REPO / "tests" / "fixtures" / "lm_eval"
    check_likelihood_sweep(sweep_cfg(["dg_piqa", "dg_echo"], [str(folder), str(echo)], "sampler.threshold=0.5,0.9"))
    check_likelihood_sweep(sweep_cfg(["dg_piqa"], [str(folder)], "sampler.threshold=0.5"))


@pytest.mark.slow
def test_sampler_sweep_over_likelihood_task_refused_before_any_job(tasks, tmp_path):
    folder, _ = tasks
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run", "-m", "model=tiny_masked", "eval=lm_eval",
         "eval.tasks=[dg_arc_challenge,dg_hellaswag]", f"eval.include_path=[{folder}]", "eval.include_defaults=false",
         "sampler.threshold=0.5,0.9", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "sampler.threshold" in proc.stderr and "dg_arc_challenge" in proc.stderr
    assert not (tmp_path / "sweep").exists()  # refused before any job: no wall-time bound (tests run on busy machines)


@pytest.mark.slow
def test_lm_evals_own_command_line_on_our_engine(model_paths, tasks, tmp_path):
    folder, _ = tasks
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.lmeval", "--model", "dllm",
         "--model_args", f"model=tiny_masked,path={model_paths['tiny_masked']},mc_num=8,run_dir={tmp_path / 'rows'}",
         "--tasks", "dg_arc_challenge,dg_hellaswag", "--include_path", str(folder), "--limit", "2", "--device", "cpu",
         "--output_path", str(out), "--log_samples"],
        cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = list(out.rglob("results_*.json"))
    assert len(results) == 1
    res = json.loads(results[0].read_text())
    assert set(res["results"]) == {"dg_arc_challenge", "dg_hellaswag"}
    samples = list(out.rglob("samples_dg_*.jsonl"))
    assert len(samples) == 2
    first = json.loads(samples[0].read_text().splitlines()[0])
    assert len(first["resps"]) == 4  # one (logprob, is_greedy) per choice
    rows = (tmp_path / "rows" / "samples.jsonl").read_text().splitlines()
    assert len(rows) == 16 and all(json.loads(r)["method"] == "mc_elbo" for r in rows)


@pytest.mark.parametrize(
    "task, shots, mc_num, cfg_scale",
    [("arc_challenge", 0, 128, 0.5), ("hellaswag", 0, 128, 0.5), ("piqa", 0, 128, 0.5), ("winogrande", 5, 128, 0.0),
     ("mmlu", 5, 1, 0.0), ("gpqa_main_n_shot", 5, 128, 0.5)],
)  # fmt: skip
def test_llada_base_presets(task, shots, mc_num, cfg_scale):
    """eval=llada_base/<task>: LLaDA-8B-Base's published protocol (eval_llada.sh), checked when the eval is built."""
    from hydra.utils import instantiate

    cfg = compose("model=tiny_masked", f"eval=llada_base/{task}")
    ev = instantiate(cfg.eval)
    assert ev.tasks == [task] and ev.num_fewshot == shots and ev.apply_chat_template is False
    assert (ev.likelihood.mc_num, ev.likelihood.cfg_scale, ev.likelihood.greedy_check) == (mc_num, cfg_scale, False)


# issue 54 item 9: offline, a task's hub data set is checked before any model loads, for both entry points


@pytest.mark.slow  # indexes lm-eval's 14,000 task files (about 1 s)
def test_task_hub_datasets_read_from_the_yamls(tasks):
    from evals.lmeval.task_types import task_hub_datasets

    folder, names = tasks
    found = task_hub_datasets(["arc_challenge", "hellaswag", "mmlu"])
    assert found["allenai/ai2_arc"] == ["arc_challenge"] and found["Rowan/hellaswag"] == ["hellaswag"]
    assert len(found["cais/mmlu"]) == 57  # a group: every member task's set
    # the stand-ins include the built-in YAMLs but read local files (`dataset_path: json`): nothing from the hub
    assert task_hub_datasets(names, [str(folder)], include_defaults=False) == {}
    assert task_hub_datasets(names, [str(folder)]) == {}


def offline_env(tmp_path: Path) -> dict[str, str]:
    hf = tmp_path / "hf_home"  # an empty cache
    return {**app_env(), "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf), "HF_DATASETS_CACHE": str(hf / "datasets")}


@pytest.mark.slow
def test_offline_harness_run_names_the_missing_data_set_before_the_model_loads(model_paths, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run", "model=tiny_ar", f"model.path={model_paths['tiny_ar']}", "eval=lm_eval",
         "eval.tasks=[arc_challenge]", f"paths.output_dir={tmp_path / 'out'}"],
        cwd=REPO, env=offline_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-3]  # Hydra's report of a config error ends with it and its hint
    assert line.startswith("ValueError: eval=lm_eval: the hub data set allenai/ai2_arc is not in this machine's cache")
    assert "HF_HUB_OFFLINE=1" in line and "point arc_challenge at a local copy" in line and "dataset_path: json" in line
    assert "ConnectionError" not in proc.stderr and "Loading weights" not in proc.stderr
    assert not list(tmp_path.rglob("samples.jsonl"))


@pytest.mark.slow
def test_offline_lm_eval_command_line_fails_in_one_line(model_paths, tasks, tmp_path):
    folder, _ = tasks
    argv = ["--model", "dllm", "--model_args", f"model=tiny_ar,path={model_paths['tiny_ar']}", "--limit", "1",
            "--device", "cpu", "--include_path", str(folder)]  # fmt: skip
    cli = [sys.executable, "-m", "harness.runner.lmeval_cli", *argv]
    env = offline_env(tmp_path)
    proc = subprocess.run([*cli, "--tasks", "dg_piqa,hellaswag"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: --tasks: the hub data set Rowan/hellaswag is not in this machine's cache")
    assert "point hellaswag at a local copy: a task YAML in a folder named by --include_path" in proc.stderr
    ok = subprocess.run([*cli, "--tasks", "dg_piqa"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:]  # a local copy of the task (the stand-in) runs offline
