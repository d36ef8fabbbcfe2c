"""Denoising films: per sample, an animation of its canvases being denoised, one frame per denoiser step.

    python -m harness.films RUN_DIR --samples 4 [--out DIR] [--fps 4]

Needs a run made with `sampler.capture_trajectory=true` (each sample's `trajectory`, contract/records.py).
Frame k shows the k-th denoising step of the sample (all canvases in order, so frames = recorded steps):
the step's **argmax canvas** (what the canvas would commit if it stopped here; the last frame of a canvas is
the canvas it committed), each position coloured by what the sampler did with it this step:
green = accepted (its sampled token is kept in the next input), red = re-noised (the next input has fresh
noise there; the text is the model's current argmax, greyed), and an orange frame where the argmax changed
since the previous step (every position on a canvas's first step). The header gives canvas and step, the
step's temperature, its mean entropy and the accepted count. Text evals show one cell per token (the token
decoded by the run's tokenizer, whitespace made visible); Sudoku in the compact format (one token per cell)
shows the grid itself filling in: givens grey, cells from earlier canvases plain, the current canvas's cells
coloured as above. Written as GIF (imageio; the last frame held 2 s) and, where ffmpeg is present
(imageio-ffmpeg ships one), MP4. Frames are drawn with PIL without anti-aliasing (a handful of colours, so a
GIF stores them exactly).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (120, 120, 120)
ACCEPTED, RENOISED, GIVEN = (198, 234, 198), (246, 208, 208), (222, 222, 222)
CHANGED, RULE = (230, 120, 0), (60, 60, 60)
FONT_SIZE = 13
GIF_HOLD_MS = 2000


@dataclass
class Frame:
    """One denoising step of one sample, as drawn."""

    sample_id: str
    canvas: int
    canvases: int
    step: int
    steps: int  # steps this canvas took
    tokens: list[int]  # the step's argmax canvas
    accepted: list[bool] | None  # kept its sampled token (None: not recorded)
    changed: list[bool]  # argmax differs from the previous step of this canvas
    mean_entropy: float
    temperature: float | None
    committed: list[int]  # tokens committed by the earlier canvases


def frames_of(row: dict[str, Any]) -> list[Frame]:
    """One frame per recorded denoising step of a stored sample row (all canvases in order)."""
    traj = row.get("trajectory") or []
    canvases = 1 + max((t["canvas"] for t in traj), default=-1)
    steps = [sum(t["canvas"] == k for t in traj) for k in range(canvases)]
    frames: list[Frame] = []
    committed: list[int] = []
    prev: dict[str, Any] | None = None
    for t in traj:
        if prev is not None and prev["canvas"] != t["canvas"]:
            committed = committed + list(prev["argmax"])
            prev = None
        tokens = list(t["argmax"])
        acc = t.get("accepted")
        frames.append(
            Frame(
                sample_id=str(row.get("sample_id", "")),
                canvas=t["canvas"],
                canvases=canvases,
                step=t["step"],
                steps=steps[t["canvas"]],
                tokens=tokens,
                accepted=None if acc is None else [p in set(acc) for p in range(len(tokens))],
                changed=[True] * len(tokens) if prev is None else [a != b for a, b in zip(tokens, prev["argmax"])],
                mean_entropy=float(t.get("mean_entropy", float("nan"))),
                temperature=t.get("temperature"),
                committed=committed,
            )
        )
        prev = t
    return frames


@cache
def _font() -> ImageFont.FreeTypeFont:
    from matplotlib import font_manager

    return ImageFont.truetype(font_manager.findfont("DejaVu Sans Mono"), FONT_SIZE)


def _canvas_image(width: int, height: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    # MP4 (yuv420p) wants sides divisible by 16: pad rather than let the encoder resize
    img = Image.new("RGB", (-(-width // 16) * 16, -(-height // 16) * 16), WHITE)
    draw = ImageDraw.Draw(img)
    draw.fontmode = "1"  # no anti-aliasing: only the palette's colours, stored exactly in a GIF
    return img, draw


def _header(f: Frame) -> list[str]:
    n = len(f.tokens)
    acc = f"accepted {sum(f.accepted)}/{n}" if f.accepted is not None else "accepted: not recorded"
    temp = f"T={f.temperature:.3f}" if f.temperature is not None else "T=?"
    return [
        f.sample_id[:90],
        f"canvas {f.canvas + 1}/{f.canvases}  step {f.step + 1}/{f.steps}  {temp}  mean H={f.mean_entropy:.4f}  "
        f"{acc}  changed {sum(f.changed)}",
    ]


def _legend(draw: ImageDraw.ImageDraw, x: int, y: int, items: list[tuple[tuple, str]]) -> None:
    for colour, label in items:
        draw.rectangle([x, y + 2, x + 12, y + 14], fill=colour, outline=CHANGED if colour == WHITE else RULE)
        draw.text((x + 16, y), label, fill=BLACK, font=_font())
        x += 16 + int(_font().getlength(label)) + 14


class TextRenderer:
    """One cell per canvas position: the token's text, coloured by accepted / re-noised / changed."""

    def __init__(self, tokenizer, columns: int = 16, cell_chars: int = 7):
        self.tokenizer, self.columns, self.cell_chars = tokenizer, columns, cell_chars

    @cache  # noqa: B019 (one renderer per film run; token ids are few)
    def label(self, token: int) -> str:
        text = self.tokenizer.decode([token])
        text = text.replace("\n", "\u21b5").replace("\t", "\u21e5").replace(" ", "\u00b7") or "\u2205"
        return text if len(text) <= self.cell_chars else text[: self.cell_chars - 1] + "\u2026"

    def __call__(self, f: Frame) -> np.ndarray:
        n = len(f.tokens)
        cols = min(self.columns, n)
        rows = -(-n // cols)
        cw, ch = int(_font().getlength("M") * self.cell_chars) + 8, FONT_SIZE + 9
        top = 3 * (FONT_SIZE + 6) + 8
        img, draw = _canvas_image(max(cols * cw + 16, 760), top + rows * ch + 12)
        for i, line in enumerate(_header(f)):
            draw.text((8, 4 + i * (FONT_SIZE + 6)), line, fill=BLACK, font=_font())
        _legend(draw, 8, 4 + 2 * (FONT_SIZE + 6), [(ACCEPTED, "accepted"), (RENOISED, "re-noised"), (WHITE, "changed")])
        for p, tok in enumerate(f.tokens):
            x, y = 8 + (p % cols) * cw, top + (p // cols) * ch
            kept = f.accepted[p] if f.accepted is not None else True
            draw.rectangle(
                [x, y, x + cw - 3, y + ch - 3],
                fill=ACCEPTED if kept else RENOISED,
                outline=CHANGED if f.changed[p] else (ACCEPTED if kept else RENOISED),
                width=2,
            )
            draw.text((x + 4, y + 3), self.label(tok), fill=BLACK if kept else GREY, font=_font())
        return np.asarray(img)


class SudokuRenderer:
    """The grid itself: givens grey, cells from earlier canvases plain, the current canvas's cells coloured."""

    def __init__(self, tokenizer, puzzle: str):
        from evals.sudoku.grid import BOX_SHAPES, size_of

        self.tokenizer, self.puzzle = tokenizer, puzzle
        self.n = size_of(puzzle)
        self.box = BOX_SHAPES[self.n]

    def __call__(self, f: Frame) -> np.ndarray:
        n, (br, bc) = self.n, self.box
        cell = 34
        top = 3 * (FONT_SIZE + 6) + 10
        img, draw = _canvas_image(max(n * cell + 24, 760), top + n * cell + 16)
        for i, line in enumerate(_header(f)):
            draw.text((8, 4 + i * (FONT_SIZE + 6)), line, fill=BLACK, font=_font())
        _legend(
            draw,
            8,
            4 + 2 * (FONT_SIZE + 6),
            [
                (GIVEN, "given"),
                (ACCEPTED, "filled (accepted)"),
                (RENOISED, "uncertain (re-noised)"),
                (WHITE, "changed"),
            ],
        )
        start = len(f.committed)
        seq = f.committed + f.tokens
        for c in range(n * n):
            r, k = divmod(c, n)
            x, y = 12 + k * cell, top + r * cell
            given = self.puzzle[c] != "0"
            p = c - start  # position in the current canvas (negative: an earlier canvas)
            current = 0 <= p < len(f.tokens)
            kept = f.accepted[p] if current and f.accepted is not None else True
            fill = GIVEN if given else (ACCEPTED if kept else RENOISED) if current else WHITE
            outline = CHANGED if current and f.changed[p] and not given else RULE
            draw.rectangle([x, y, x + cell, y + cell], fill=fill, outline=outline, width=2 if outline == CHANGED else 1)
            text = self.tokenizer.decode([seq[c]]).strip()[:2] if c < len(seq) else ""
            colour = BLACK if given or kept else GREY
            draw.text((x + cell // 2 - 4 * len(text), y + 9), text, fill=colour, font=_font())
        for i in range(0, n + 1):  # box rules
            if i % bc == 0:
                draw.line([12 + i * cell, top, 12 + i * cell, top + n * cell], fill=BLACK, width=3)
            if i % br == 0:
                draw.line([12, top + i * cell, 12 + n * cell, top + i * cell], fill=BLACK, width=3)
        return np.asarray(img)


def ffmpeg_available() -> bool:
    try:
        import imageio_ffmpeg

        return Path(imageio_ffmpeg.get_ffmpeg_exe()).exists()
    except (ImportError, RuntimeError):
        return False


def write_film(images: list[np.ndarray], stem: Path, fps: float, mp4: bool | None = None) -> list[Path]:
    """`<stem>.gif` (the last frame held), and `<stem>.mp4` when ffmpeg is present."""
    import imageio.v3 as iio

    stem.parent.mkdir(parents=True, exist_ok=True)
    gif = stem.with_suffix(".gif")
    ms = 1000.0 / fps
    iio.imwrite(gif, np.stack(images), duration=[ms] * (len(images) - 1) + [max(ms, GIF_HOLD_MS)], loop=0)
    out = [gif]
    if mp4 if mp4 is not None else ffmpeg_available():
        path = stem.with_suffix(".mp4")
        iio.imwrite(path, np.stack(images), plugin="FFMPEG", fps=fps, macro_block_size=16)
        out.append(path)
    return out


def renderer_for(run_dir: Path, cfg) -> Any:
    """The run's tokenizer, and a function `row -> renderer` (Sudoku compact: the grid; otherwise text)."""
    from transformers import AutoTokenizer

    from contract.paths import resolve_model_ref

    tok = AutoTokenizer.from_pretrained(
        resolve_model_ref(str(cfg.model.path), "model.path"), revision=cfg.model.get("revision")
    )
    ev = cfg.get("eval") or {}
    sudoku = str(ev.get("_target_", "")).startswith("evals.sudoku") and ev.get("format", "compact") == "compact"

    def make(row: dict[str, Any]):
        puzzle = (row.get("meta") or {}).get("puzzle")
        return SudokuRenderer(tok, puzzle) if sudoku and puzzle else TextRenderer(tok)

    return make


def _file_stem(sample_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", sample_id)[:80] or "sample"


def make_films(
    run_dir: str | Path, out_dir: str | Path | None = None, samples: int = 4, fps: float = 4.0
) -> list[Path]:
    """Films of the first `samples` stored samples with a trajectory; returns the files written (GIF, MP4)."""
    from omegaconf import OmegaConf

    from harness.runner.store import read_samples

    run_dir = Path(run_dir)
    if samples < 1:
        raise ValueError(f"samples: must be >= 1, got {samples}")
    if not fps > 0:
        raise ValueError(f"fps: must be > 0, got {fps}")
    if not (run_dir / "config.yaml").exists() or not (run_dir / "samples.jsonl").exists():
        raise FileNotFoundError(f"{run_dir} is not a run dir (config.yaml and samples.jsonl expected)")
    rows = [r for r in read_samples(run_dir) if r.get("trajectory")][:samples]
    if not rows:
        raise ValueError(f"{run_dir}: no sample has a trajectory; run it with sampler.capture_trajectory=true")
    make = renderer_for(run_dir, OmegaConf.load(run_dir / "config.yaml"))
    out = Path(out_dir) if out_dir else run_dir / "films"
    written: list[Path] = []
    for row in rows:
        render = make(row)
        written += write_film([render(f) for f in frames_of(row)], out / _file_stem(row["sample_id"]), fps)
    return written


def sweep_films(run_dirs: list[Path], out_dir: str | Path, samples: int, fps: float = 4.0) -> list[Path]:
    """`make_films` for every run dir that captured trajectories, under `<out_dir>/<run name>/`."""
    written: list[Path] = []
    for run_dir in run_dirs:
        try:
            written += make_films(run_dir, Path(out_dir) / Path(run_dir).name, samples=samples, fps=fps)
        except ValueError:  # no trajectories in this run (e.g. an AR baseline)
            continue
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--samples", type=int, default=4, help="films for the first N samples with a trajectory")
    p.add_argument("--out", default=None, help="output folder (default: RUN_DIR/films)")
    p.add_argument("--fps", type=float, default=4.0, help="frames (denoising steps) per second")
    a = p.parse_args(argv)
    for path in make_films(a.run_dir, a.out, samples=a.samples, fps=a.fps):
        print(path)


if __name__ == "__main__":
    main()
