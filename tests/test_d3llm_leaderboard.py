"""`experiment=d3llm_leaderboard`: the dLLM AUP leaderboard's tasks with its protocol. It composes for every released
model without importing torch, its CPU twin runs end to end (code graded in the sandbox), and the summary's figure
shows our runs beside the published d3LLM-LLaDA, d3LLM-Dream, Fast-dLLM-v2 and EAGLE-3 points."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers.app import REPO, app_env, run_app

RELEASED = ["llada_8b_instruct", "dream", "llada2_mini", "sdar", "diffusiongemma_26b", "gemma4_ar"]
TASKS = ["d3llm_gsm8k_cot", "d3llm_math", "d3llm_humaneval", "d3llm_mbpp"]
HEAVY = ("torch", "transformers", "pandas", "matplotlib", "datasets")

COMPOSE = """
import json, sys
from omegaconf import OmegaConf
from tests.helpers.app import compose_app
from evals.d3llm_protocol import resolve_protocol
out = {}
base = compose_app("experiment=d3llm_leaderboard", with_hydra=True)
params = {k: str(v) for k, v in base.hydra.sweeper.params.items()}
for model in params["model"].split(","):
    for ev in params["eval"].split(","):
        cfg = compose_app("experiment=d3llm_leaderboard", f"model={model}", f"eval={ev}")
        e = OmegaConf.to_container(cfg.eval, resolve=True)
        out[f"{model}/{ev}"] = {"path": cfg.model.path, "task": e["task"], "protocol": resolve_protocol(e["protocol"],
            e["model_name"]), "tokens": e["max_new_tokens"], "sandbox": e.get("sandbox"), "target": e["_target_"]}
print(json.dumps({"params": params, "runs": out, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
"""


@pytest.mark.slow  # a Python subprocess that composes the 24 runs
def test_composes_for_every_released_model_without_torch():
    proc = subprocess.run(
        [sys.executable, "-c", COMPOSE % (HEAVY,)], cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [], got["heavy"]  # composing (and picking each protocol) needs none of them
    assert got["params"]["model"].split(",") == RELEASED and got["params"]["eval"].split(",") == TASKS
    assert len(got["runs"]) == len(RELEASED) * len(TASKS)
    for key, run in got["runs"].items():
        model, ev = key.split("/")
        assert "/" in run["path"] and not run["path"].startswith(("outputs", "models")), key  # hub weights
        assert run["protocol"] == ("llada" if model == "llada_8b_instruct" else "dream"), key
        assert run["tokens"] == 256 and ev == f"d3llm_{run['task']}"
        if run["task"] in ("humaneval", "mbpp"):  # graded in our sandbox, bubblewrap or an explicit opt-in
            assert run["target"] == "evals.code_tasks.CodeTaskEval" and run["sandbox"]["allow_weaker"] is False


@pytest.mark.slow
def test_bad_protocol_fails_before_any_model_loads(tmp_path):
    proc = run_app(
        "model=tiny_ar", "eval=twin/d3llm_gsm8k_cot", "eval.protocol=lada", f"paths.output_dir={tmp_path}", check=False
    )
    assert proc.returncode != 0 and "eval.protocol: 'lada'" in proc.stderr
    assert not list(tmp_path.rglob("samples.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, repo",
    [
        ("gsm8k_cot", "openai/gsm8k"),
        ("math", "EleutherAI/hendrycks_math"),
        ("mbpp", "google-research-datasets/mbpp"),  # the hub check comes before the sandbox's (preflight)
    ],
)
def test_hub_data_is_checked_before_any_model_loads(task, repo, tmp_path):
    """The real path reads the hub set; offline and not cached, the run fails up front naming it."""
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets")}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run", "model=tiny_ar", f"eval=d3llm_{task}", f"paths.output_dir={tmp_path}"],
        cwd=REPO,
        env={**app_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and f"eval=d3llm_{task}: the hub data set {repo} is not in this machine's cache" in (
        proc.stderr
    )
    assert not list(tmp_path.rglob("samples.jsonl"))


def test_a_closing_assistant_message_is_continued():
    """The dream protocol's reply prefix ("Here is the completed function: ..."): the prompt ends inside it."""
    from transformers import AutoTokenizer

    from contract.text import encode_prompt

    tok = AutoTokenizer.from_pretrained(REPO / "outputs/tiny/diffusion")
    chat = [{"role": "user", "content": "Write f"}, {"role": "assistant", "content": "Here:\n```python\ndef f():\n"}]
    text = tok.decode(encode_prompt(tok, chat))
    assert text.endswith("<start_of_turn>model\nHere:\n```python\ndef f():\n"), text
    assert tok.decode(encode_prompt(tok, chat[:1])).endswith("<start_of_turn>model\n")


def test_published_rows_reproduce_the_leaderboards_aup():
    """The points and y_max kept in harness/figures/d3llm_published.yaml give the leaderboard's published AUP
    (d3LLM's leaderboard table, asset/imgs/dllm_leaderboard.png, as tests/test_aup.py quotes it)."""
    from harness.figures.leaderboard import published

    source, label, rows = published()
    assert source.startswith("https://github.com/hao-ai-lab/d3LLM/") and label == "published, not re-run"
    assert sorted(rows) == sorted(TASKS)
    for ev in TASKS:
        assert {r.method for r in rows[ev]} == {"d3LLM-LLaDA", "d3LLM-Dream", "Fast-dLLM-v2-7B", "EAGLE-3"}
    by = {(ev, r.method): r for ev in TASKS for r in rows[ev]}
    assert round(by[("d3llm_gsm8k_cot", "d3LLM-LLaDA")].aup, 1) == 637.7
    assert round(by[("d3llm_mbpp", "d3LLM-LLaDA")].aup, 1) == 88.4
    assert round(by[("d3llm_gsm8k_cot", "EAGLE-3")].aup, 1) == 319.0


def test_the_figure_draws_our_runs_beside_the_published_points():
    from harness.figures.leaderboard import leaderboard_figures, published

    table = pd.DataFrame(
        {
            "eval": ["d3llm_mbpp-n2-abc", "d3llm_mbpp-n2-abc", "prompts-n3-def"],
            "eval_name": ["d3llm_mbpp", "d3llm_mbpp", "prompts"],
            "model": ["ours_a", "ours_b", "ours_a"],
            "tpf": [1.0, 2.5, 1.0],
            "quality": [0.5, 0.25, 0.1],
            "aup_d3llm": [50.0, 40.0, 10.0],
        }
    )
    figs = leaderboard_figures(table)
    assert list(figs) == ["leaderboard_d3llm_mbpp-n2-abc"]  # only the leaderboard's tasks get one
    lines = {ln.get_label(): ln for ln in figs["leaderboard_d3llm_mbpp-n2-abc"].axes[0].get_lines()}
    # AUP against the y_max of our runs and the published MBPP rows together (63.8: Qwen-2.5-7B-it, MBPP-Instruct)
    ours = lines[f"ours_b (ours, AUP {2.5 * 25.0:.1f} at y_max 63.8)"]
    assert list(ours.get_xdata()) == [2.5] and list(ours.get_ydata()) == [25.0]  # accuracy in percent
    for row in published()[2]["d3llm_mbpp"]:
        drawn = next(ln for name, ln in lines.items() if name.startswith(f"{row.method}: {row.task} (published"))
        assert list(zip(drawn.get_xdata(), drawn.get_ydata(), strict=True)) == list(row.points)
        assert "not re-run" in drawn.get_label()


@pytest.mark.slow
@pytest.mark.sandbox
def test_twin_runs_end_to_end_with_the_figure(tmp_path):
    sweep = tmp_path / "sweep"
    run_app("experiment=twin/d3llm_leaderboard", f"hydra.sweep.dir={sweep}", timeout=900)
    table = pd.read_csv(sweep / "summary" / "summary.csv")
    assert sorted(table["eval_name"].unique()) == sorted(TASKS) and len(table) == 12
    assert set(table["model"]) == {"tiny_diffusion", "tiny_ar", "tiny_masked"} and table["tpf"].notna().all()
    metrics = [json.loads(p.read_text()) for p in sweep.glob("*/metrics.json")]
    code = [m for m in metrics if m["leaderboard_task"] in ("humaneval", "mbpp")]
    assert len(code) == 6 and {m["protocol"] for m in metrics} == {"dream"}
    graded = [json.loads(line) for p in sweep.glob("*d3llm_mbpp*/samples.jsonl") for line in p.open()]
    assert graded and {r["sandbox"] for r in graded} == {"bwrap"}  # every MBPP program ran in bubblewrap
    figures = sorted(p.name for p in (sweep / "summary").glob("leaderboard_*.png"))
    assert len(figures) == 4 and all(any(t in f for f in figures) for t in TASKS)
