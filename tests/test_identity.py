"""Run identity: a resumed run never mixes samples of other weights or other inputs, batch sizes get their own
run dirs, one writer per run dir, and fronts only compare runs on the same items."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from harness.runner.store import ResultStore, RunDirBusy
from tests.helpers.app import compose_app


def _cfg(overrides):
    return compose_app(*overrides)


@pytest.fixture
def app(tmp_path, tiny_diffusion_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_diffusion_dir, model)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    args = [f"model.path={model}", f"eval.path={prompts}", "eval.max_new_tokens=8", "sampler.max_steps=2"]
    return tmp_path, model, prompts, args


def _run(args, run_dir):
    from harness.run import run

    return run(_cfg(args), run_dir)


def test_retrained_weights_at_the_same_path_stop_a_resume(app):
    tmp, model, _, args = app
    run_dir = tmp / "run"
    _run(args, run_dir)
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    (run_dir / "samples.jsonl").write_text("\n".join(lines[:2]) + "\n")  # killed half way
    weights = next(model.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # "retrained"
    with pytest.raises(RuntimeError, match=r"model\.path.*resume=false"):
        _run(args, run_dir)
    assert len((run_dir / "samples.jsonl").read_text().splitlines()) == 2  # nothing was mixed in
    metrics = _run([*args, "resume=false"], run_dir)  # starting afresh works
    assert metrics["num_samples"] == 4


def test_edited_prompts_under_the_same_ids_stop_a_resume(app):
    tmp, _, prompts, args = app
    run_dir = tmp / "run"
    _run(args, run_dir)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    rows[1]["prompt"] = "an edited prompt"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RuntimeError, match=r"p1.*resume=false"):
        _run(args, run_dir)


def test_batch_sizes_get_their_own_run_dirs():
    names = {bs: _cfg([f"batch_size={bs}"]).run_name for bs in (1, 8, 40)}
    assert len(set(names.values())) == 3 and all(f"__bs{bs}__" in n for bs, n in names.items())


def test_one_writer_per_run_dir(tmp_path):
    first = ResultStore(tmp_path / "run")
    with pytest.raises(RunDirBusy, match="another process"):
        ResultStore(tmp_path / "run")
    first.close()
    ResultStore(tmp_path / "run").close()  # free again once the first writer is done


def test_fronts_never_mix_item_sets(tmp_path):
    """Two runs named 'sudoku6' on different puzzle sets form two groups, each with its own front and areas."""
    from harness.analysis.aggregate import collect
    from harness.analysis.fronts import annotate_fronts
    from tests.helpers.runs import make_run_dir

    make_run_dir(tmp_path, "easy", [(36, 2, 1.0, [2])] * 8, eval_name="sudoku6")
    make_run_dir(tmp_path, "hard", [(36, 6, 0.5, [6])] * 100, eval_name="sudoku6")
    for name, eval_id in (("easy", "sudoku6-n8-aaaaaa"), ("hard", "sudoku6-n100-bbbbbb")):
        path = tmp_path / name / "metrics.json"
        m = json.loads(path.read_text())
        m["run"]["eval_id"] = eval_id
        path.write_text(json.dumps(m))
    df = collect([tmp_path])
    assert sorted(df["eval"]) == ["sudoku6-n100-bbbbbb", "sudoku6-n8-aaaaaa"]
    assert set(df["eval_name"]) == {"sudoku6"}
    table, fronts = annotate_fronts(df)
    assert len(fronts) == 2 and table["on_front"].all()  # each run is alone on its own item set's front


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,message",
    [
        (["eval=sudoku6", "eval.blanks=[30,10]"], "eval.blanks"),
        (["eval=sudoku6", "eval.num_puzzles=-1"], "eval.num_puzzles"),
        (["eval=sudoku6", "eval.path=/no/such/puzzles.jsonl"], "not found"),
        (["eval.path={dup}"], "duplicate sample ids"),
        (["eval.path={empty}"], "no items"),
        (["sampler.canvas_length=100000"], "max_position_embeddings"),
    ],
)
def test_bad_eval_inputs_fail_before_the_model_loads(tmp_path, overrides, message, monkeypatch):
    dup, empty = tmp_path / "dup.jsonl", tmp_path / "empty.jsonl"
    dup.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    empty.write_text("")
    import models.diffusion_gemma as dg

    def never(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(dg.DiffusionGemmaForBlockDiffusion, "from_pretrained", never)
    args = [o.format(dup=dup, empty=empty) for o in overrides]
    from hydra.errors import InstantiationException  # Hydra wraps errors raised by an eval's constructor

    with pytest.raises((ValueError, FileNotFoundError, InstantiationException), match=message):
        _run(["model=tiny_diffusion", *args], tmp_path / "run")
    assert not (tmp_path / "run" / "samples.jsonl").exists()
