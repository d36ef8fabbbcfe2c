"""The ParallelBench twin's training side: its tokenizer round-trips every generated prompt and answer, the training
stream never holds an eval instance and its answers are right by ParallelBench's own metrics, the trainer's
parallelbench recipes run and resume, the shipped twins load and answer in format, and the matched-speed table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from contract.text import encode_prompt
from evals.parallelbench.eval import messages_for
from evals.parallelbench.instances import generate
from evals.parallelbench.metrics import score_sample
from evals.parallelbench.tasks import GENERATED, TASKS
from evals.parallelbench.train_data import HELD_OUT_SEEDS, TwinStream, answer_text, case_key, held_out_keys
from evals.parallelbench.twin_tokenizer import twin_tokenizer
from evals.sudoku import batches
from evals.sudoku.puzzles import is_test_grid
from evals.sudoku.train import ModelShape, TrainConfig, train

REPO = Path(__file__).resolve().parents[1]
TINY = ModelShape(hidden=32, layers=2, heads=2, head_dim=16, intermediate=64, num_experts=1)


def test_twin_tokenizer_round_trips_prompts_and_answers_compactly():
    tok = twin_tokenizer()
    for name in GENERATED:
        for sample in generate(name, 4, 0):
            ids = encode_prompt(tok, messages_for(TASKS[name].prompt, sample), None)
            assert tok.unk_token_id not in ids and len(ids) < 100, name
            answer = answer_text(sample["answer"])
            reply = tok(answer, add_special_tokens=False)["input_ids"]
            assert tok.decode(reply) == answer and len(reply) + 1 <= TASKS[name].max_tokens, name
    assert tok.decode(tok("any other text, 42!")["input_ids"]) == "any other text, 42!"  # one char a token


@pytest.mark.slow  # the held-out set: every eval instance of 10 seeds x 100 samples (~10 s)
def test_training_stream_is_disjoint_from_eval_instances_and_right():
    tok = twin_tokenizer()
    stream = TwinStream(tok, seed=3)
    held = held_out_keys()
    evals = {case_key(s) for n in GENERATED if "sudoku" not in n for s in generate(n, 100, HELD_OUT_SEEDS[0])}
    assert evals <= held
    for name in GENERATED:
        for _ in range(40):
            sample = stream.sample(name)
            cases = [sample, *sample["input"]["icl_examples"]]
            assert not any(case_key(c) in held for c in cases), name
            # the trained answer is right by ParallelBench's metric (many-answer tasks: the generator's example)
            assert score_sample(TASKS[name].metric, answer_text(sample["answer"]), sample["answer"])["score"] == 1
            if "sudoku" in name:
                assert not any(is_test_grid(c["answer"].replace("\n", "")) for c in cases)
                assert sample["input"]["sudoku"].count("0") == 4
    eval_sudoku = generate("puzzle/sudoku_n4_12", 20, 0)
    assert all(is_test_grid(s["answer"].replace("\n", "")) for s in eval_sudoku)


def _cfg(tmp_path, kind: str, **kw) -> TrainConfig:
    shape = dict(canvas_length=32) if kind == "diffusion" else dict(block_length=32) if kind == "masked" else {}
    fields = dict(
        kind=kind,
        task="parallelbench",
        pb_tasks=["waiting_line/copy", "puzzle/sudoku_n4_12"],
        out_dir=str(tmp_path / kind),
        steps=4,
        batch_size=4,
        warmup_steps=1,
        model=TINY,
        threads=1,
        log_every=1,
        save_every=2,
        eval_every=0,
        t_min=0.02 if kind == "diffusion" else 0.0,
        **shape,
    )
    return TrainConfig(**{**fields, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["diffusion", "masked", "ar"])
def test_parallelbench_recipe_resumes_after_an_interruption(tmp_path, kind, monkeypatch, capsys):
    torch.set_num_threads(1)
    cfg = _cfg(tmp_path, kind)
    real, calls = batches.TwinBatches.loss, {"n": 0}

    def dies_at_step_3(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("interrupted")
        return real(self, *a, **k)

    monkeypatch.setattr(batches.TwinBatches, "loss", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    out = Path(cfg.out_dir)
    assert (out / "train_state.pt").is_file()
    monkeypatch.setattr(batches.TwinBatches, "loss", real)
    final = train(cfg)
    assert "resuming from step 2" in capsys.readouterr().out
    assert final["step"] == 4 and not (out / "train_state.pt").exists()
    rows = list(csv.DictReader(open(out / "train_log.csv")))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["task"] == "parallelbench" and saved["step"] == 4


def test_parallelbench_recipe_refuses_the_sudoku_probe(tmp_path):
    with pytest.raises(ValueError, match="eval_every"):
        train(_cfg(tmp_path, "ar", eval_every=2))


@pytest.mark.slow
@pytest.mark.parametrize("fam", ["pb_twin_diffusion", "pb_twin_masked", "pb_twin_ar", "pb_twin_ar_draft"])
def test_shipped_twins_load_and_answer_in_format(tmp_path, fam):
    """Every shipped twin decodes the copy task through the harness into ParallelBench's strict list format. Their
    copy score is 0 at this training budget (docs/parallelbench.md); what the AR twin has learned is to copy the
    last names of the line (94% in the sweep; chance ~18%)."""
    from tests.helpers.app import run_app

    sweep = tmp_path / "runs"
    run_app(
        "hydra.mode=RUN",
        f"fam={fam}",
        "+pb_level=p1",
        "eval=twin/parallelbench",
        "eval.task=waiting_line/copy",
        "eval.num_samples=6",
        f"paths.output_dir={sweep}",
        timeout=600,
    )
    (metrics,) = sweep.glob("runs/*/metrics.json")
    assert json.loads(metrics.read_text())["pb_task"] == "waiting_line/copy"
    rows = [json.loads(line) for line in (metrics.parent / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["format_ok"] and r["pb_score_strict"] is not None for r in rows)
    if fam.startswith("pb_twin_ar"):
        names = [(n, json.loads(r["meta"]["reference"])) for r in rows for n in json.loads(r["text"])]
        last = sum(n.split()[-1] in {m.split()[-1] for m in ref} for n, ref in names) / len(names)
        assert last >= 0.5


def _run(tmp_path, name: str, task: str, tps: float, scores: list[float], **knobs) -> dict:
    run = tmp_path / name
    run.mkdir()
    rows = [
        {"sample_id": f"s{i}", "pb_score": s, "nfe": 10, "num_tokens": 10, "wall_time_s": 0.1}
        for i, s in enumerate(scores)
    ]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    label = name.split("_")[0]
    return {"model": label, "label": label, "sampler": "rule", "pb_task": task, "pb_tokens_per_step": tps,
            "run_dir": str(run), **{f"sampler.{k}": v for k, v in knobs.items()}}  # fmt: skip


def test_matched_table_takes_the_best_setting_at_the_speed_and_tests_on_the_same_items(tmp_path):
    import pandas as pd

    from harness.analysis.parallelbench_matched import format_matched, matched_dominance, matched_table

    good, bad = [1.0] * 20, [0.0] * 20
    table = pd.DataFrame(
        [
            _run(tmp_path, "uni_slow", "waiting_line/copy", 1.5, good, bound=0.1),
            _run(tmp_path, "uni_fast", "waiting_line/copy", 5.0, bad, bound=3.0),
            _run(tmp_path, "mask_slow", "waiting_line/copy", 1.2, bad, bound=0.9),
            _run(tmp_path, "mask_fast", "waiting_line/copy", 1.4, good[:10] + bad[:10], bound=0.1),
        ]
    )
    m = matched_table(table, targets=(1.0, 4.0)).set_index(["target_tps", "label"])
    assert m.loc[(1.0, "uni"), "score"] == 1.0 and m.loc[(1.0, "uni"), "setting"] == "bound=0.1"
    assert m.loc[(4.0, "uni"), "score"] == 0.0 and pd.isna(m.loc[(4.0, "mask"), "score"])  # mask: cannot reach 4
    assert m.loc[(1.0, "mask"), "score"] == 0.5  # its fast setting is also its best one above 1 token / step
    assert m.loc[(1.0, "uni"), "score_lo"] == 1.0 and 0.2 < m.loc[(1.0, "mask"), "score_lo"] < 0.5
    dom = matched_dominance(matched_table(table, targets=(1.0, 4.0)))
    wins = {(d.target_tps, d.strategy, d.vs) for d in dom.itertuples() if d.dominates}
    # >= 1 token / step: uni right on 20 / 20 at 1.5, mask on 10 / 20 at 1.4: uni faster and better (McNemar)
    assert wins == {(1.0, "uni / uni / rule", "mask / mask / rule")}
    assert "Waiting Line" in format_matched(table)
