"""Train small Sudoku solvers: a DiffusionGemma block-diffusion model, or a Gemma 4 AR model / AR draft.

Run:  python -m evals.sudoku.train                       # recipe conf/train/sudoku6_diffusion.yaml (CPU default)
      python -m evals.sudoku.train train=sudoku6_ar      # same data and budget, AR baseline
      python -m evals.sudoku.train train=sudoku9_gpu     # 9x9 on a GPU
Config: conf/train.yaml (under the main config root: shares `paths` and `local` with the eval app) picks a
recipe from conf/train/; any TrainConfig field can be overridden (`steps=100 model.hidden=64`).

Diffusion objective (uniform-state, as the checkpoint was trained): per example t ~ U(t_min, 1); every
canvas position is replaced by a uniformly random token from the whole vocabulary with probability t;
cross-entropy on all canvas positions (the model must both fill blanks and spot corrupted tokens, which
is what the entropy-bound sampler relies on). Self-conditioning: with probability `self_cond_prob` a
no-grad first pass on the same noisy canvas gives logits, scaled by 1/T (T ~ U(sc_temperature), as the
sampler feeds temperature-scaled logits), fed to the second pass via `self_conditioning_mask`.
AR objective: next-token cross-entropy on the answer tokens after the prompt.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import hydra
import torch
import torch.nn.functional as F
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from contract.paths import register_path_resolver
from evals.sudoku.check import reference_decode
from evals.sudoku.eval import SudokuEval
from evals.sudoku.stream import Curriculum, PuzzleStream


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
    kind: str = "diffusion"  # "diffusion" | "ar"
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
    device: str = "cpu"
    threads: int = 2  # CPU threads (0 = torch default)
    bf16: bool = False  # autocast on cuda
    seed: int = 0
    log_every: int = 25
    save_every: int = 250
    eval_every: int = 500
    eval_puzzles: int = 64
    eval_blanks: list[int] = field(default_factory=lambda: [18, 24])
    init_from: str | None = None  # start from this checkpoint's weights (continued training / fine-tuning)
    max_minutes: float = 0.0  # wall-clock budget (0 = none): the run ends at `steps` or here, schedule included
    resume: bool = True


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


def build_model(cfg: TrainConfig, tokenizer):
    from transformers import DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM

    from models.tiny import ar_config, diffusion_config, vocab_size_for

    m = cfg.model
    vocab = vocab_size_for(tokenizer)
    shape = dict(
        hidden=m.hidden,
        layers=m.layers,
        heads=m.heads,
        head_dim=m.head_dim,
        intermediate=m.intermediate,
        max_position=max(256, 4 * cfg.size * cfg.size),
    )
    if cfg.kind == "diffusion":
        return DiffusionGemmaForBlockDiffusion(
            diffusion_config(vocab, canvas_length=cfg.size * cfg.size, num_experts=m.num_experts, **shape)
        )
    if cfg.kind == "ar":
        return Gemma4ForCausalLM(ar_config(vocab, **shape))
    raise ValueError(f"kind must be 'diffusion' or 'ar', got {cfg.kind!r}")


class DigitCodec:
    """Digit strings <-> token ids of the char tokenizer, via a lookup table (fast, no tokenizer call)."""

    def __init__(self, tokenizer):
        ids = tokenizer.convert_tokens_to_ids(list("0123456789"))
        self.table = torch.tensor(ids, dtype=torch.long)

    def encode(self, strings: list[str], device) -> torch.Tensor:
        digits = torch.tensor([[ord(ch) - 48 for ch in s] for s in strings], dtype=torch.long)
        return self.table[digits].to(device)


def diffusion_loss(model, cfg: TrainConfig, prompt: torch.Tensor, clean: torch.Tensor, gen: torch.Generator):
    b, c = clean.shape
    vocab = model.config.text_config.vocab_size
    dev = clean.device
    t = cfg.t_min + (1 - cfg.t_min) * torch.rand(b, generator=gen).to(dev)
    corrupt = torch.rand(b, c, generator=gen).to(dev) < t[:, None]
    noisy = torch.where(corrupt, torch.randint(0, vocab, (b, c), generator=gen).to(dev), clean)
    sc_mask = (torch.rand(b, generator=gen) < cfg.self_cond_prob).to(dev)
    sc_logits = None
    if sc_mask.any():
        with torch.no_grad():
            first = model(input_ids=prompt[sc_mask], decoder_input_ids=noisy[sc_mask]).logits.float()
        lo, hi = cfg.sc_temperature
        temp = lo + (hi - lo) * torch.rand(first.shape[0], 1, 1, generator=gen).to(dev)
        sc_logits = torch.zeros(b, c, first.shape[-1], device=dev, dtype=first.dtype)
        sc_logits[sc_mask] = first / temp
    logits = model(
        input_ids=prompt,
        decoder_input_ids=noisy,
        self_conditioning_logits=sc_logits,
        self_conditioning_mask=sc_mask if sc_logits is not None else None,
    ).logits
    return F.cross_entropy(logits.float().reshape(b * c, -1), clean.reshape(-1))


def ar_loss(model, prompt: torch.Tensor, clean: torch.Tensor):
    ids = torch.cat([prompt, clean], dim=1)
    labels = ids.clone()
    labels[:, : prompt.shape[1]] = -100
    return model(input_ids=ids, labels=labels).loss


def quick_eval(model, cfg: TrainConfig, tokenizer, n: int, seed: int = 1234) -> dict:
    """Solved rate and mean per-row TPF on `n` fresh held-out puzzles (`eval_blanks` blanks), decoded in one
    batch by the Sudoku reference path (`evals.sudoku.check.reference_decode`: transformers' own `generate`,
    reference sampler / greedy)."""
    ev = SudokuEval(size=cfg.size, num_puzzles=n, blanks=cfg.eval_blanks, seed=seed, format="compact")
    was_training = model.training
    model.eval()
    rows = reference_decode(model, tokenizer, ev, batch_size=n)
    model.train(was_training)
    tpf = float(torch.tensor([r["tpf"] for r in rows]).mean())  # float32 mean of the per-row TPFs
    return {"solved": sum(r["solved"] for r in rows) / n, "tpf": tpf}


def save(model, tokenizer, out: Path, cfg: TrainConfig, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # sampler knobs stay at transformers' defaults (= the reference sampler); only ids are pinned
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), **meta}, indent=2))


def train(cfg: TrainConfig) -> dict:
    """Run the recipe; returns final figures. Checkpoints land in `cfg.out_dir` every `save_every` steps."""
    from models.tiny import char_tokenizer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    dev = torch.device(cfg.device)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = char_tokenizer()
    codec = DigitCodec(tokenizer)
    model = build_model(cfg, tokenizer)
    if cfg.init_from:
        model = type(model).from_pretrained(cfg.init_from)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    state_path = out / "train_state.pt"
    start, elapsed0 = 0, 0.0
    if cfg.resume and state_path.exists():
        st = torch.load(state_path, map_location=dev, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start, elapsed0 = st["step"], st["elapsed_s"]
        print(f"resuming from step {start}")
    n_params = sum(p.numel() for p in model.parameters())
    curriculum = Curriculum(tuple(cfg.curriculum_start), tuple(cfg.curriculum_end), cfg.curriculum_ramp)
    stream = PuzzleStream(cfg.size, curriculum, seed=cfg.seed + start, fresh_per_batch=cfg.fresh_per_batch)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + start)
    log_path = out / "train_log.csv"
    new_log = not (log_path.exists() and start > 0)
    log_f = open(log_path, "w" if new_log else "a", newline="")
    log = csv.writer(log_f)
    if new_log:
        log.writerow(["step", "loss", "lr", "blanks_lo", "blanks_hi", "elapsed_s", "eval_solved", "eval_tpf"])
    model.train()
    t0 = time.perf_counter() - elapsed0
    run_loss, run_n, step = 0.0, 0, start
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if (cfg.bf16 and dev.type == "cuda") else None
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train {cfg.kind}", unit="step")
    for step in bar:
        frac = progress(cfg, step, time.perf_counter() - t0)
        lr = lr_at(cfg, step, frac)
        for g in opt.param_groups:
            g["lr"] = lr
        puzzles, solutions = stream.batch(frac, cfg.batch_size)
        prompt, clean = codec.encode(puzzles, dev), codec.encode(solutions, dev)
        with amp if amp is not None else torch.autocast("cpu", enabled=False):
            if cfg.kind == "diffusion":
                loss = diffusion_loss(model, cfg, prompt, clean, gen)
            else:
                loss = ar_loss(model, prompt, clean)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        run_loss, run_n = run_loss + loss.item(), run_n + 1
        done = step + 1
        ev = {}
        last = done == cfg.steps or progress(cfg, done, time.perf_counter() - t0) >= 1.0
        if cfg.eval_every and (done % cfg.eval_every == 0 or last):
            ev = quick_eval(model, cfg, tokenizer, cfg.eval_puzzles)
        if done % cfg.log_every == 0 or ev or last:
            lo, hi = curriculum.range_at(frac)
            elapsed = time.perf_counter() - t0
            log.writerow(
                [
                    done,
                    f"{run_loss / run_n:.5f}",
                    f"{lr:.6f}",
                    lo,
                    hi,
                    f"{elapsed:.1f}",
                    ev.get("solved", ""),
                    ev.get("tpf", ""),
                ]
            )
            log_f.flush()
            bar.set_postfix(
                loss=f"{run_loss / run_n:.4f}", blanks=f"{lo}-{hi}", **{k: f"{v:.3f}" for k, v in ev.items()}
            )
            run_loss, run_n = 0.0, 0
        if done % cfg.save_every == 0 or last:
            meta = {"step": done, "elapsed_s": time.perf_counter() - t0, "num_parameters": n_params}
            save(model, tokenizer, out, cfg, meta)
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "step": done, "elapsed_s": meta["elapsed_s"]},
                state_path,
            )
        if last:
            break
    log_f.close()
    final = {"step": step + 1, "elapsed_s": time.perf_counter() - t0, "num_parameters": n_params}
    if state_path.exists():
        state_path.unlink()  # optimizer state is only for resuming; shipped checkpoints stay small
    return final


def config_from(dc: DictConfig) -> TrainConfig:
    """The typed recipe: the composed config's TrainConfig fields (not `paths` / `local`), checked against
    the dataclass (a wrong type fails here, before anything is built)."""
    names = {f.name for f in fields(TrainConfig)}
    recipe = {
        k: OmegaConf.to_container(dc[k], resolve=True) if OmegaConf.is_config(dc[k]) else dc[k]
        for k in dc
        if k in names
    }
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), recipe))


def register_train_configs() -> None:
    """What conf/train.yaml needs before composing: the typed schema and the `${repo_root:}` resolver."""
    ConfigStore.instance().store(name="train_schema", node=TrainApp)
    register_path_resolver()


@hydra.main(config_path="../../conf", config_name="train", version_base="1.3")
def main(dc: DictConfig) -> None:
    cfg = config_from(dc)
    print(json.dumps(asdict(cfg)))
    print(json.dumps(train(cfg)))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the recipes build models locally; never reach for the hub
    register_train_configs()
    main()
