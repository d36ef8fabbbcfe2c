"""Training smoke tests (evals.sudoku.train): a few steps of each recipe on a tiny shape, then reload."""

from __future__ import annotations

import csv

import pytest
import torch

from evals.sudoku.train import DigitCodec, ModelShape, TrainConfig, build_model, lr_at, objective, progress, train
from models.tiny import char_tokenizer
from models.training.objectives import Batch, block_diffusion_loss

TINY = ModelShape(hidden=32, layers=2, heads=2, head_dim=16, intermediate=64, num_experts=1)


def _cfg(tmp_path, kind: str) -> TrainConfig:
    return TrainConfig(
        kind=kind,
        out_dir=str(tmp_path / kind),
        size=4,
        steps=4,
        batch_size=8,
        warmup_steps=1,
        curriculum_start=[4, 8],
        curriculum_end=[6, 10],
        model=TINY,
        threads=1,
        log_every=1,
        save_every=2,
        eval_every=0,
        fresh_per_batch=1,
    )


@pytest.mark.parametrize("kind", ["diffusion", "ar"])
def test_short_run_saves_a_reloadable_checkpoint(tmp_path, kind):
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM

    torch.set_num_threads(1)
    cfg = _cfg(tmp_path, kind)
    final = train(cfg)
    out = tmp_path / kind
    assert final["step"] == 4 and not (out / "train_state.pt").exists()
    rows = list(csv.DictReader(open(out / "train_log.csv")))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in rows)
    cls = DiffusionGemmaForBlockDiffusion if kind == "diffusion" else Gemma4ForCausalLM
    model = cls.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids("7") == char_tokenizer().convert_tokens_to_ids("7")
    if kind == "diffusion":
        assert model.config.canvas_length == 16


def test_diffusion_loss_falls_on_a_fixed_batch():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = TrainConfig(size=4, model=TINY, self_cond_prob=0.5)
    tok = char_tokenizer()
    model = build_model(cfg, tok)
    codec = DigitCodec(tok)
    prompt = codec.encode(["1200340000000000", "0000000000000021"], "cpu")
    clean = codec.encode(["1243341221344321", "3412214312344321"[:16]], "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        gen = torch.Generator().manual_seed(1)  # same noise each step
        loss, _ = block_diffusion_loss(model, objective(cfg), Batch(prompt, clean), gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_schedule_is_driven_by_steps_or_time():
    cfg = TrainConfig(steps=100, warmup_steps=10, max_minutes=1.0)
    assert progress(cfg, 50, 0.0) == 0.5 and progress(cfg, 10, 45.0) == 0.75 and progress(cfg, 10, 120.0) == 1.0
    assert lr_at(cfg, 0, 0.0) == pytest.approx(cfg.lr / 10)
    assert lr_at(cfg, 50, 1.0) == pytest.approx(cfg.lr * cfg.min_lr_ratio)
    with pytest.raises(ValueError, match="kind"):
        build_model(TrainConfig(kind="gan"), char_tokenizer())


@pytest.mark.slow
def test_entry_point_composes_a_recipe_from_any_directory(tmp_path):
    """`python -m evals.sudoku.train train=<recipe> key=value`: conf/train.yaml + a conf/train/ recipe, run from
    another working directory; the in-training probe decodes through the Sudoku reference path."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "ckpt"
    args = [
        "train=sudoku6_ar",
        "size=4",
        "steps=2",
        "batch_size=4",
        "warmup_steps=1",
        "curriculum_start=[4,8]",
        "curriculum_end=[6,10]",
        "fresh_per_batch=1",
        "threads=1",
        "log_every=1",
        "save_every=2",
        "eval_every=2",
        "eval_puzzles=3",
        "eval_blanks=[4,6]",
        "model.hidden=32",
        "model.layers=1",
        "model.heads=2",
        "model.head_dim=16",
        "model.intermediate=64",
        f"out_dir={out}",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "evals.sudoku.train", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg, final = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert cfg["kind"] == "ar" and cfg["size"] == 4 and cfg["model"]["intermediate"] == 64 and final["step"] == 2
    rows = list(csv.DictReader(open(out / "train_log.csv")))
    assert rows[-1]["eval_tpf"] == "1.0" and 0.0 <= float(rows[-1]["eval_solved"]) <= 1.0
    assert json.loads((out / "train_config.json").read_text())["out_dir"] == str(out)
