"""The training recipe schema shared by every trainer: `TrainConfig` (conf/train.yaml + conf/train/*.yaml), the
step/time budget, the learning-rate schedule and the diffusion objective a recipe selects.

Separate from the trainers (`evals.sudoku.train` from scratch, `evals.sudoku.finetune` LoRA) so both import it
and the entry point can dispatch to either without an import cycle.
"""

from __future__ import annotations

import contextlib
import csv
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from contract.paths import register_path_resolver
from evals.sudoku.data import DataSpec
from models.loading.lora import LoraSpec
from models.training.objectives import DiffusionObjective


@dataclass
class ModelShape:
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    head_dim: int = 32
    intermediate: int = 256
    num_experts: int = 2  # diffusion only (DiffusionGemma's MoE needs >= 1 expert)


@dataclass
class TrainConfig:
    kind: str = "diffusion"  # "diffusion" | "ar" | "masked"
    task: str = "sudoku"  # sudoku (the puzzle stream) | parallelbench (the twin's Waiting Line / Puzzle stream)
    pb_tasks: list[str] = field(default_factory=list)  # parallelbench: the tasks trained on ([]: every generated one)
    canvas_length: int | None = None  # diffusion: the canvas (null: size * size, the Sudoku answer)
    out_dir: str = "models/checkpoints/sudoku6_diffusion"
    size: int = 6
    steps: int = 3000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    curriculum_start: list[int] = field(default_factory=lambda: [2, 12])
    curriculum_end: list[int] = field(default_factory=lambda: [14, 26])
    curriculum_ramp: float = 0.4  # fraction of the budget (see `progress`) over which the blank range ramps up
    fresh_per_batch: int = 8
    t_min: float = 0.02
    self_cond_prob: float = 0.5
    sc_temperature: list[float] = field(default_factory=lambda: [0.6, 0.8])
    model: ModelShape = field(default_factory=ModelShape)
    block_length: int | None = None  # masked only: the block-causal block (null: the whole N*N answer)
    max_position: int = 256  # the model's position table (at least 4 * size * size)
    device: str = "cpu"
    threads: int = 2  # CPU threads (0 = torch default)
    bf16: bool = False  # autocast on cuda
    seed: int = 0
    log_every: int = 25
    save_every: int = 250
    eval_every: int = 500
    eval_puzzles: int = 64
    eval_blanks: list[int] = field(default_factory=lambda: [18, 24])
    init_from: str | None = None  # start from this checkpoint's weights (continued training / the LoRA base)
    max_minutes: float = 0.0  # wall-clock budget (0 = none): the run ends at `steps` or here, schedule included
    resume: bool = True
    # objective and optimizer knobs the LoRA recipes set (defaults: the from-scratch recipes' values)
    t_max: float = 1.0  # noise level t ~ U(t_min, t_max)
    encoder_loss_weight: float = 0.0  # + this x the causal encoder's next-token loss on prompt + clean response
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    adam_eps: float = 1e-8
    # LoRA fine-tuning (evals.sudoku.finetune): set `lora` to train adapters on `init_from` from `data.path`
    lora: LoraSpec | None = None
    data: DataSpec = field(default_factory=DataSpec)
    dtype: str = "float32"  # dtype the LoRA base loads in (bfloat16 for the 26B model)
    gradient_checkpointing: bool = False


@dataclass
class TrainApp(TrainConfig):
    """The composed training config (conf/train.yaml): a recipe's TrainConfig fields plus the groups shared with
    the eval app. Typed, so every field is overridable on the command line and a wrong type fails at once."""

    paths: dict[str, Any] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)  # per-machine settings (conf/local/), unused here


def progress(cfg: TrainConfig, step: int, elapsed_s: float) -> float:
    """Fraction of the budget spent: steps, or wall time when `max_minutes` is set and runs out first.

    On a shared CPU the step rate is unknown in advance; driving the LR decay and the curriculum by this
    fraction makes a time-capped run still finish its schedule (anneal + full curriculum) on time.
    """
    p = step / cfg.steps
    if cfg.max_minutes:
        p = max(p, elapsed_s / (60 * cfg.max_minutes))
    return min(1.0, p)


def lr_at(cfg: TrainConfig, step: int, frac: float) -> float:
    """Linear warmup over `warmup_steps`, then cosine decay to `min_lr_ratio * lr` as `frac` reaches 1."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


class Schedule:
    """The step loop every trainer shares (from scratch and LoRA): a progress bar from `start` (a resumed run keeps
    its elapsed time, so a time budget stays one budget), and per step the budget fraction and the learning rate,
    already set on `opt`."""

    def __init__(self, cfg: TrainConfig, opt, start: int, elapsed_s: float, desc: str):
        from tqdm import tqdm

        self.cfg, self.opt = cfg, opt
        self.t0 = time.perf_counter() - elapsed_s
        self.bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=desc, unit="step")

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def is_last(self, done: int) -> bool:
        """`done` steps use up the budget (steps, or `max_minutes`)."""
        return done == self.cfg.steps or progress(self.cfg, done, self.elapsed()) >= 1.0

    def __iter__(self) -> Iterator[tuple[int, float, float]]:
        for step in self.bar:
            frac = progress(self.cfg, step, self.elapsed())
            lr = lr_at(self.cfg, step, frac)
            for g in self.opt.param_groups:
                g["lr"] = lr
            yield step, frac, lr


def start_run(cfg: TrainConfig):
    """What every trainer does first: CPU threads, the seeds (torch and `random`), and the device."""
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    return torch.device(cfg.device)


class TrainLog:
    """`train_log.csv` in `out_dir`: a fresh file with `header`, or, when a run resumes (`start` > 0) and the
    file exists, appended to; every row is flushed, so a killed run keeps its curve."""

    def __init__(self, out_dir: Path, start: int, header: list[str]):
        path = Path(out_dir) / "train_log.csv"
        new = not (path.exists() and start > 0)
        self._file = open(path, "w" if new else "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self.row(header)

    def row(self, values: list[Any]) -> None:
        self._writer.writerow(values)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def autocast(cfg: TrainConfig, device):
    """bf16 autocast on CUDA when the recipe asks for it; a no-op context otherwise."""
    import torch

    if cfg.bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def objective(cfg: TrainConfig) -> DiffusionObjective:
    """The recipe's uniform-state objective (models.training.objectives; one definition for every trainer)."""
    return DiffusionObjective(
        t_min=cfg.t_min,
        t_max=cfg.t_max,
        self_cond_prob=cfg.self_cond_prob,
        sc_temperature=list(cfg.sc_temperature),
        encoder_weight=cfg.encoder_loss_weight,
    )


def config_from(dc: DictConfig) -> TrainConfig:
    """The typed recipe: the composed config's TrainConfig fields (not `paths` / `local`), checked against
    the dataclass (a wrong type fails here, before anything is built)."""
    names = {f.name for f in fields(TrainConfig)}
    recipe = {
        k: OmegaConf.to_container(dc[k], resolve=True, throw_on_missing=True) if OmegaConf.is_config(dc[k]) else dc[k]
        for k in dc
        if k in names
    }
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), recipe))


def register_train_configs() -> None:
    """What conf/train.yaml needs before composing: the typed schema and the `${repo_root:}` resolver."""
    ConfigStore.instance().store(name="train_schema", node=TrainApp)
    register_path_resolver()
