"""The generic lm-eval bridge on a made-up local generate_until task (no GPQA specifics, no hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.lmeval import LmEvalEval
from harness.runner.store import ResultStore

FIXTURE = Path(__file__).parent / "fixtures" / "lm_eval" / "echo_task.yaml"


@pytest.fixture
def task_dir(tmp_path):
    data = tmp_path / "echo.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in ("alpha", "beta", "gamma")))
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "echo_task.yaml").write_text(FIXTURE.read_text().replace("PLACEHOLDER", json.dumps(str(data))))
    return folder


def test_config_errors_before_model():
    with pytest.raises(ValueError, match="eval.tasks"):
        LmEvalEval(tasks=[])
    with pytest.raises(FileNotFoundError, match="eval.include_path"):
        LmEvalEval(tasks=["x"], include_path="/nonexistent/folder")
    with pytest.raises(ValueError, match="include_defaults=false"):
        LmEvalEval(tasks=["x"], include_defaults=False)


@pytest.mark.slow
def test_generic_task_rows_and_metrics(tiny_diffusion_dir, adapter_factory, task_dir, tmp_path):
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    dec = BlockDiffusionDecoder(adapter_factory(tiny_diffusion_dir), EntropyBoundConfig(max_steps=2))
    store = ResultStore(tmp_path / "run")
    ev = LmEvalEval(tasks=["dg_echo"], include_path=[str(task_dir)], include_defaults=False, apply_chat_template=False)
    with pytest.raises(ValueError, match="unknown to lm-eval"):
        LmEvalEval(tasks=["dg_nope"], include_path=[str(task_dir)], include_defaults=False).run(dec, store, 1, 0)
    m = ev.run(dec, store, batch_size=3, seed=0)
    assert m["quality_metric"] == "dg_echo/exact_match,none" and m["num_samples"] == 3
    rows = {r["sample_id"]: r for r in store.load().values()}
    assert set(rows) == {"dg_echo/0", "dg_echo/1", "dg_echo/2"}
    for r in rows.values():
        assert r["num_tokens"] <= 8 and r["nfe"] > 0  # the task's max_gen_toks beat the eval default
        assert r["context"] == f"Repeat: {['alpha', 'beta', 'gamma'][r['doc_id']]}\n"
    # without the chat template the prompt is the raw context: the first prompt tokens spell it
    assert rows["dg_echo/0"]["prompt_tokens"] == len(dec.encode("Repeat: alpha\n"))
