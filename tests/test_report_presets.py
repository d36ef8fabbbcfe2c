"""The `experiment=report_*` presets: each GPU preset has a CPU twin with the same protocol, the twins run end to
end through the real app and sweep summary, and the summary prints the report's value beside the measured one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from tests.helpers.app import REPO, app_env, compose_app, run_app

PRESETS = sorted(p.stem for p in (REPO / "conf/experiment").glob("report_*.yaml"))
# What a twin may change: where the data come from and how much of it is decoded (never the protocol).
TWIN_EVAL_KEYS = {"data_files", "data_dir", "release", "limit", "max_new_tokens"}


def _grades_code(preset: str) -> bool:
    """A preset whose eval runs model-written code (LiveCodeBench), itself or through the presets it extends
    (`defaults: - /experiment/<name>`), needs the sandbox."""
    text = (REPO / f"conf/experiment/{preset}.yaml").read_text()
    bases = re.findall(r"^\s*-\s*/experiment/([\w/]+)\s*$", text, flags=re.M)
    return "livecodebench" in text or any(_grades_code(b) for b in bases)


def _compose(*overrides):
    return compose_app(*overrides, with_hydra=True)


def _swept_models(preset: str) -> list[str]:
    """The model of every sweep point: swept as `model`, or set by each swept `fam` option (report_families)."""
    params = _compose(f"experiment={preset}").hydra.sweeper.params
    if "model" in params:
        return [_compose(f"model={m}").model.name for m in params.model.split(",")]
    return [_compose(f"experiment={preset}", f"fam={f}").model.name for f in params.fam.split(",")]


def _expected(preset: str, eval_name: str) -> dict:
    """The preset's published figures for runs of `eval_name` (report_families takes each eval's own)."""
    cfg = _compose(f"experiment={preset}")
    if "published" in cfg.report:
        cfg = _compose(f"experiment={preset}", f"eval={eval_name}")
    return OmegaConf.to_container(cfg.report.expected, resolve=True)


def test_every_report_figure_has_a_preset_and_a_twin():
    assert {"report_gpqa", "report_lcb", "report_speed", "report_batch_scaling", "report_sudoku"} <= set(PRESETS)
    for name in PRESETS:
        assert (REPO / f"conf/experiment/twin/{name}.yaml").is_file(), f"{name} has no CPU twin"


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_twin_keeps_the_presets_protocol(name):
    gpu, cpu = _compose(f"experiment={name}"), _compose(f"experiment=twin/{name}")
    assert gpu.report.expected and OmegaConf.to_container(gpu.report) == OmegaConf.to_container(cpu.report)
    assert OmegaConf.to_container(gpu.sampler) == OmegaConf.to_container(cpu.sampler)
    assert gpu.sampler.name == "entropy_bound"  # the checkpoint's sampler, defaults untouched
    assert gpu.model.enable_thinking is not None  # the thinking switch is part of the protocol
    if cpu.model.enable_thinking is not None:  # (the small Sudoku model's template has none)
        assert gpu.model.enable_thinking == cpu.model.enable_thinking
    ge, ce = OmegaConf.to_container(gpu.eval), OmegaConf.to_container(cpu.eval)
    if ge["name"] == ce["name"]:
        assert {k for k in ge.keys() | ce.keys() if ge.get(k) != ce.get(k)} <= TWIN_EVAL_KEYS
    else:  # report_sudoku: a small model reads 4x4 compact grids, not the 26B's 9x9 chat prompt
        assert ge["_target_"] == ce["_target_"]
    # the GPU preset decodes the released models (hub ids), the twin the repo's tiny ones
    for m in _swept_models(name):
        path = str(_compose(f"model={m}").model.path)
        assert re.fullmatch(r"(google|inclusionAI|JetLM)/[\w.-]+", path), (m, path)
    for m in _swept_models(f"twin/{name}"):
        assert (REPO / str(_compose(f"model={m}").model.path)).is_dir(), m  # a model the repo builds or ships
    if gpu.model.enable_thinking:  # thinking and non-thinking runs get their own token budgets
        assert gpu.eval.max_new_tokens >= 16384
    else:
        assert gpu.eval.max_new_tokens <= 2048


@pytest.mark.slow
@pytest.mark.parametrize(  # the LiveCodeBench twins grade in the real sandbox
    "name", [pytest.param(n, marks=pytest.mark.sandbox) if _grades_code(n) else n for n in PRESETS]
)
def test_twin_runs_end_to_end_and_the_summary_shows_the_report(name, tmp_path):
    extra = []
    if name == "report_sudoku":  # the twin's LoRA adapter: the CPU recipe, a few steps (same code path)
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "harness.train", "train=sudoku4_lora_cpu", "steps=4", f"paths.output_dir={out}"],
            cwd=REPO,
            env=app_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        extra = [f"paths.output_dir={out}"]
    sweep = tmp_path / "sweep"
    proc = run_app(f"experiment=twin/{name}", f"hydra.sweep.dir={sweep}", *extra, timeout=900)
    table = pd.read_csv(sweep / "summary" / "summary.csv")
    published = {ev: _expected(name, ev.split("-n")[0]) for ev in table["eval"].unique()}
    for _, row in table.iterrows():
        expected = published[row["eval"]]
        key = f"{row['label']}+lora" if "+lora-" in row["run_name"] else row["label"]
        values = expected.get(row["model"], expected.get(key))
        if values is None:  # e.g. the tiny AR + draft twin of AR+MTP: no published figure
            assert all(pd.isna(row.get(f"report_{k}")) for v in expected.values() for k in v)
            continue
        for metric, value in values.items():
            assert row[f"report_{metric}"] == pytest.approx(value)  # the report's figure beside ...
            if metric in row:
                assert pd.notna(row[metric])  # ... the measured one
    assert table["report"].notna().any()
    if name == "report_batch_scaling":
        assert "crossover on" in proc.stdout and "(report: about 32)" in proc.stdout
        assert sorted(table["batch_size"].unique()) == [1, 2, 4]
        for label in ("diffusion", "ar", "ar+draft"):  # every decoder at every concurrency
            assert sorted(table[table["label"] == label]["batch_size"]) == [1, 2, 4], label
        assert (
            "crossover on" in proc.stdout
            and "tiny_ar_draft reaches" in proc.stdout
            and "tiny_ar reaches" in proc.stdout
        )
        # latency as users see it, for every decoder: percentiles in metrics.json, the summary and the figure
        assert "Latency as users see it" in proc.stdout
        for m in (json.loads(p.read_text()) for p in sweep.glob("*/metrics.json")):
            assert 0 < m["ttft_p50_s"] <= m["ttft_p95_s"] <= m["ttft_p99_s"] <= m["latency_p99_s"], m["run"]["label"]
            assert m["latency_p50_s"] <= m["latency_p95_s"] and m["user_tokens_per_second_p1"] > 0
        assert table[["ttft_p95_s", "latency_p95_s"]].notna().all().all()
        assert list((sweep / "summary").glob("latency_*.png"))
    else:  # the printed table: each published value right after the measured column
        for metric in {k for e in published.values() for v in e.values() for k in v}:
            header = next(line.split() for line in proc.stdout.splitlines() if f"report_{metric}" in line.split())
            assert header.index(f"report_{metric}") == header.index(metric) + 1
    if name == "report_families":  # each family with its own sampler, on both evals, side by side in one table
        assert set(table["label"]) == {"diffusion", "ar", "masked"} and table["eval"].nunique() == 2
        for family in ("masked", "uniform-state", "AR"):  # its best run (a backticked run name) on each eval
            best = [line for line in proc.stdout.splitlines() if line.startswith(f"| {family} |") and "`" in line]
            assert len(best) == 2 and {"gpqa" in b for b in best} == {True, False}, family
    metrics = [json.loads(p.read_text()) for p in sweep.glob("*/metrics.json")]
    assert metrics and all(m["run"]["eval_id"] for m in metrics)


@pytest.mark.slow
def test_report_expectations_are_checked_before_loading(tmp_path):
    proc = run_app(
        "experiment=twin/report_speed", "report.expected.ar.tpf=fast", f"hydra.sweep.dir={tmp_path}", check=False
    )
    assert proc.returncode != 0 and "report.expected.ar: must map metric names to numbers" in proc.stderr
    assert not list(Path(tmp_path).glob("*/samples.jsonl"))


@pytest.mark.slow
def test_thinking_switch_needs_a_template_that_reads_it(tmp_path):
    """The tiny tokenizer's template reads `enable_thinking` (as Gemma 4's does); one that does not is refused."""
    from transformers import AutoTokenizer

    from contract.text import check_thinking_template, encode_prompt

    tok = AutoTokenizer.from_pretrained(REPO / "outputs/tiny/diffusion")
    chat = [{"role": "user", "content": "hi"}]
    off, on = encode_prompt(tok, chat, False), encode_prompt(tok, chat, True)
    assert tok.decode(off).endswith("<think></think>\n") and not tok.decode(on).endswith("</think>\n")
    check_thinking_template(tok, True)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="never reads `enable_thinking`"):
        check_thinking_template(tok, False)
    check_thinking_template(tok, None)  # no switch set: nothing to check
    out = tmp_path / "tok"
    tok.save_pretrained(out)
    (out / "config.json").write_text((REPO / "outputs/tiny/diffusion/config.json").read_text())
    proc = run_app(f"model.path={out}", "model.enable_thinking=true", "debug=default", check=False)
    assert proc.returncode != 0 and "never reads `enable_thinking`" in proc.stderr


def test_gated_hub_sources_are_declared_by_the_evals():
    """Which hub data sets an eval would read (access-checked up front): none when local files are given."""
    from hydra.utils import instantiate

    hub = instantiate(_compose("eval=gpqa").eval)
    local = instantiate(_compose("eval=gpqa", f"eval.data_files={REPO}/tests/fixtures/gpqa/gpqa_made_up.jsonl").eval)
    assert hub.hub_datasets() == ["Idavidrein/gpqa"] and local.hub_datasets() == []


def test_local_livecodebench_files_declare_no_hub_source():  # building the eval needs no sandbox
    from hydra.utils import instantiate

    lcb = _compose("eval=livecodebench", f"eval.data_dir={REPO}/tests/fixtures/livecodebench").eval
    assert instantiate(lcb).hub_datasets() == []


def test_batch_size_auto_plans_ar_models_too():
    """`batch_size=auto` works for every preset's models: AR and AR + draft (batched now) from the memory estimate,
    at most the number of items (3)."""
    from hydra.utils import instantiate

    from harness.runner.batch_plan import plan_batch_size
    from harness.runner.evaluate import checked_items
    from harness.runner.plan import decoder_plan

    for model, check in (("tiny_ar", lambda b: b == 3), ("tiny_ar_draft", lambda b: b == 3)):
        cfg = _compose(f"model={model}", "batch_size=auto")
        ev = instantiate(cfg.eval)
        family = decoder_plan(cfg.model, cfg.sampler).family
        assert check(plan_batch_size(cfg, ev.max_new_tokens, instantiate(cfg.sampler), checked_items(ev), family))


def test_a_compiled_step_is_planned_at_its_bucket(monkeypatch):
    """`model.compile=step` runs a power-of-two bucket of rows with `draw_whole`: the memory check is asked for
    that (whole_step, logits_factor 3); the eager default is not."""
    from hydra.utils import instantiate

    from harness.runner.batch_plan import plan_batch_size
    from harness.runner.evaluate import checked_items
    from harness.runner.plan import decoder_plan
    from models.planning import memory

    asked = []
    check = memory.check_batch_fits

    def recording(*a, **k):
        asked.append(k)
        return check(*a, **k)

    monkeypatch.setattr(memory, "check_batch_fits", recording)
    for overrides in (("model.compile=step",), ()):
        cfg = _compose("model=tiny_diffusion", "batch_size=3", *overrides)
        ev = instantiate(cfg.eval)
        family = decoder_plan(cfg.model, cfg.sampler).family
        assert plan_batch_size(cfg, ev.max_new_tokens, instantiate(cfg.sampler), checked_items(ev), family) == 3
    assert (asked[0].get("whole_step"), asked[0].get("logits_factor")) == (True, 3.0)
    assert "whole_step" not in asked[1] and "logits_factor" not in asked[1]
