"""Denoising films (harness.figures.films) from real trajectory runs: one frame per recorded denoiser step, and the last
frame of each canvas is the canvas it committed; plus what the trajectory records for them (harness.engine.decode)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from harness.figures.films import SudokuRenderer, TextRenderer, ffmpeg_available, frames_of, main, make_films
from harness.runner.store import read_samples
from tests.helpers.app import compose_app

REPO = Path(__file__).resolve().parents[1]
SUDOKU = "models/checkpoints/sudoku6_diffusion"


def _run(run_dir: Path, *overrides: str) -> Path:
    """A real run through Hydra's composition and `harness.run.run`, in-process."""
    from harness.run import run

    run(compose_app("sampler.capture_trajectory=true", "resume=false", *overrides), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def sudoku_run(tmp_path_factory):
    # a small entropy bound: several steps per canvas, re-noised cells in the early frames
    return _run(
        tmp_path_factory.mktemp("sudoku") / "run",
        "model=sudoku6_diffusion",
        "eval=sudoku6",
        "eval.limit=3",
        "batch_size=3",
        "sampler.entropy_bound=0.02",
    )


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    # the tiny text model, canvas 16, 3 canvases per sample: films run across canvases
    return _run(
        tmp_path_factory.mktemp("text") / "run",
        "model=tiny_diffusion",
        "eval=prompts",
        "eval.limit=2",
        "eval.max_new_tokens=48",
        "sampler.max_steps=5",
    )


def _gif_frames(path: Path) -> np.ndarray:
    return iio.imread(path, index=None)


@pytest.mark.slow
def test_sudoku_films_frames_and_final_grid(sudoku_run, tmp_path):
    rows = read_samples(sudoku_run)
    files = make_films(sudoku_run, tmp_path / "films", samples=2)
    gifs = [p for p in files if p.suffix == ".gif"]
    assert len(gifs) == 2 and len(files) == (4 if ffmpeg_available() else 2)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(REPO / SUDOKU)
    for row, gif in zip(rows[:2], gifs):
        frames = frames_of(row)
        images = _gif_frames(gif)
        assert len(images) == len(frames) == len(row["trajectory"]) == sum(row["steps_per_canvas"]) == row["nfe"]
        assert any(row["renoised_per_step"][0])  # some cells were uncertain along the way
        # the last frame is the committed canvas: its digits are the answer the eval scored
        assert frames[-1].tokens == row["token_ids"]
        assert tok.decode(frames[-1].tokens) == row["text"]
        render = SudokuRenderer(tok, row["meta"]["puzzle"])
        assert np.array_equal(images[-1], render(frames[-1]))  # stored exactly (no anti-aliasing, few colours)
        assert not np.array_equal(images[0], images[-1])  # the grid fills in
        # per step: the accepted mask agrees with the counts the engine recorded
        assert [sum(f.accepted) for f in frames] == row["accepted_per_step"][0]
        if ffmpeg_available():
            assert len(iio.imread(gif.with_suffix(".mp4"), index=None, plugin="FFMPEG")) == len(frames)


@pytest.mark.slow
def test_text_films_across_canvases(text_run, tmp_path, capsys):
    rows = read_samples(text_run)
    main([str(text_run), "--samples", "1", "--out", str(tmp_path / "f"), "--fps", "8"])
    printed = capsys.readouterr().out.split()
    gif = Path(next(p for p in printed if p.endswith(".gif")))
    row = rows[0]
    frames = frames_of(row)
    assert len(_gif_frames(gif)) == len(frames) == row["nfe"] == sum(row["steps_per_canvas"])
    assert len(row["steps_per_canvas"]) > 1  # several canvases in one film
    last = {f.canvas: f for f in frames}  # each canvas's last frame
    committed = [t for k in sorted(last) for t in last[k].tokens]
    assert row["token_ids"] == [t for t in committed[: len(row["token_ids"])] if t != 0]  # pads are not output
    # a canvas's frames show the canvases committed before it
    assert all(f.committed == [t for k in range(f.canvas) for t in last[k].tokens] for f in frames)
    assert [f.changed for f in frames if f.step == 0] == [[True] * 16] * len(last)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(REPO / "outputs/tiny/diffusion")
    assert np.array_equal(_gif_frames(gif)[-1], TextRenderer(tok)(frames[-1]))


@pytest.mark.slow
def test_engine_records_accepted_and_temperature_in_both_decode_paths():
    """The trajectory fields films read: the accepted positions (their count is the step's accepted count) and the
    step's temperature (the sampler's schedule), in the continuous engine and the lockstep reference path."""
    import torch

    from harness import api
    from samplers.config import EntropyBoundConfig

    cfg = EntropyBoundConfig(max_steps=5)
    for stream in ("per_sample", "reference"):
        dec = api.load_decoder(
            str(REPO / "outputs/tiny/diffusion"), max_steps=5, capture_trajectory=True, random_stream=stream
        )
        for r in api.generate(dec, ["Hello", "Why?"], max_new_tokens=32):
            assert len(r.trajectory) == r.nfe
            for t in r.trajectory:
                assert len(t["accepted"]) == r.accepted_per_step[t["canvas"]][t["step"]], stream
                assert t["accepted"] == sorted(set(t["accepted"])) and all(0 <= p < 16 for p in t["accepted"])
                assert t["temperature"] == pytest.approx(float(cfg.temperatures(torch.tensor([t["step"]]))[0]))


def test_bad_input_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run dir"):
        make_films(tmp_path)
    with pytest.raises(ValueError, match="samples"):
        make_films(tmp_path, samples=0)


@pytest.mark.slow
def test_run_without_trajectories_is_refused(sudoku_run, tmp_path):
    import json
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(sudoku_run, plain)
    rows = read_samples(plain)
    (plain / "samples.jsonl").write_text("".join(json.dumps({**r, "trajectory": None}) + "\n" for r in rows))
    with pytest.raises(ValueError, match="capture_trajectory=true"):
        make_films(plain)


@pytest.mark.slow
def test_sweep_summary_writes_films_and_the_experts_figure(sudoku_run, text_run, tmp_path):
    """`SweepSummary(films=N)`: films of N samples per trajectory run, and the per-layer expert figure per model."""
    import shutil

    from omegaconf import OmegaConf

    from harness.tracking.callbacks import SweepSummary

    sweep = tmp_path / "sweep"
    for run in (sudoku_run, text_run):
        shutil.copytree(run, sweep / run.parent.name)
    SweepSummary(films=1).on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    out = sweep / "summary"
    assert sorted(p.name for p in out.glob("experts_*.png")) == [
        "experts_sudoku6_diffusion.png",
        "experts_tiny_diffusion.png",
    ]
    for run in (sudoku_run, text_run):
        gifs = list((out / "films" / run.parent.name).glob("*.gif"))
        assert len(gifs) == 1
        first = frames_of(read_samples(run)[0])
        assert len(_gif_frames(gifs[0])) == len(first)
