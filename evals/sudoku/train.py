"""Train small Sudoku solvers: a DiffusionGemma block-diffusion model, a masked block-diffusion model
(`evals.sudoku.masked`), or a Gemma 4 AR model / AR draft.

Run:  python -m harness.train                       # recipe conf/train/sudoku6_diffusion.yaml (CPU default)
      python -m harness.train train=sudoku6_ar      # same data and budget, AR baseline
      python -m harness.train train=sudoku6_masked  # same data, masked (absorbing-state) objective
      python -m harness.train train=sudoku9_gpu     # 9x9 on a GPU
      python -m harness.train train=sudoku9_lora    # LoRA fine-tune of DiffusionGemma 26B (docs/lora.md)
      python -m harness.train train=pb_diffusion    # task=parallelbench: the ParallelBench twins (pb_masked, pb_ar...)
(`python -m evals.sudoku.train ...` is the same entry.)
Config: conf/train.yaml (under the main config root: shares `paths` and `local` with the eval app) picks a
recipe from conf/train/; any TrainConfig field can be overridden (`steps=100 model.hidden=64`).

Batches come from `evals.sudoku.batches` by `task`: the Sudoku puzzle stream, or the ParallelBench twin's generated
Waiting Line / Puzzle prompts (variable length, padded; its own tokenizer, no in-training probe).
Diffusion objective: the uniform-state loss with self-conditioning of `models.training.objectives` (shared with the
LoRA fine-tuning of `evals.sudoku.finetune`). AR objective: next-token cross-entropy on the answer tokens
after the prompt. A recipe with `lora:` set fine-tunes adapters on `init_from` instead (`run` dispatches).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from evals.sudoku.batches import DigitCodec, batches_for
from evals.sudoku.check import reference_decode
from evals.sudoku.eval import SudokuEval
from evals.sudoku.finetune import train_lora
from evals.sudoku.masked import add_mask_token, build_masked_model, confidence_decode
from evals.sudoku.recipe import (
    ModelShape,
    Schedule,
    TrainApp,
    TrainConfig,
    TrainLog,
    autocast,
    config_from,
    lr_at,
    objective,
    progress,
    register_train_configs,
    start_run,
)

# the recipe schema lives in evals.sudoku.recipe (shared with the LoRA trainer); importable from here as before
__all__ = [
    "DigitCodec",
    "ModelShape",
    "TrainApp",
    "TrainConfig",
    "config_from",
    "lr_at",
    "objective",
    "progress",
    "register_train_configs",
    "run",
    "train",
]


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
        max_position=max(cfg.max_position, 4 * cfg.size * cfg.size),
    )
    if cfg.kind == "diffusion":
        canvas = cfg.canvas_length or cfg.size * cfg.size
        return DiffusionGemmaForBlockDiffusion(
            diffusion_config(vocab, canvas_length=canvas, num_experts=m.num_experts, **shape)
        )
    if cfg.kind == "ar":
        return Gemma4ForCausalLM(ar_config(vocab, **shape))
    if cfg.kind == "masked":
        return build_masked_model(cfg, tokenizer, shape)
    raise ValueError(f"kind must be 'diffusion', 'ar' or 'masked', got {cfg.kind!r}")


def quick_eval(model, cfg: TrainConfig, tokenizer, n: int, seed: int = 1234) -> dict:
    """Solved rate and mean per-row TPF on `n` fresh held-out puzzles (`eval_blanks` blanks), decoded in one
    batch by the Sudoku reference path (`evals.sudoku.check.reference_decode`: transformers' own `generate`,
    reference sampler / greedy)."""
    ev = SudokuEval(size=cfg.size, num_puzzles=n, blanks=cfg.eval_blanks, seed=seed, format="compact")
    was_training = model.training
    model.eval()
    rows = masked_probe(model, tokenizer, ev) if cfg.kind == "masked" else reference_decode(model, tokenizer, ev, n)
    model.train(was_training)
    tpf = float(torch.tensor([r["tpf"] for r in rows]).mean())  # float32 mean of the per-row TPFs
    return {"solved": sum(r["solved"] for r in rows) / n, "tpf": tpf}


def masked_probe(model, tokenizer, ev: SudokuEval) -> list[dict]:
    """The masked model's probe rows: `confidence_decode` (4 cells per forward) of `ev`'s puzzles, scored by `ev`."""
    items = ev.items()
    cells = ev.size * ev.size
    dev = next(model.parameters()).device
    ids = torch.tensor([tokenizer(it.prompt, add_special_tokens=False)["input_ids"] for it in items], device=dev)
    ans, forwards = confidence_decode(model, ids, cells)
    texts = tokenizer.batch_decode(ans.tolist(), skip_special_tokens=True)
    return [{**ev.score(it, text), "tpf": cells / forwards} for it, text in zip(items, texts, strict=True)]


def tokenizer_for(cfg: TrainConfig):
    """The char tokenizer (Sudoku; + `<|mask|>` for the masked model) or the ParallelBench twin's tokenizer."""
    if cfg.task == "parallelbench":
        from evals.parallelbench.twin_tokenizer import twin_tokenizer

        return twin_tokenizer()
    from models.tiny import char_tokenizer

    tokenizer = char_tokenizer()
    if cfg.kind == "masked":
        add_mask_token(tokenizer)
    return tokenizer


def save(model, tokenizer, out: Path, cfg: TrainConfig, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # sampler knobs stay at transformers' defaults (= the reference sampler); only ids are pinned
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), **meta}, indent=2))


def resume(cfg: TrainConfig, state_path: Path, model, opt, dev) -> tuple[int, float]:
    """(step, elapsed seconds) to start from: 0 for a fresh run, else the saved run's, whose model and optimizer
    state are loaded into `model` and `opt`."""
    if not (cfg.resume and state_path.exists()):
        return 0, 0.0
    st = torch.load(state_path, map_location=dev, weights_only=False)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    print(f"resuming from step {st['step']}")
    return st["step"], st["elapsed_s"]


def train(cfg: TrainConfig) -> dict:
    """Run the recipe; returns final figures. Checkpoints land in `cfg.out_dir` every `save_every` steps."""
    dev = start_run(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_for(cfg)
    model = build_model(cfg, tokenizer)
    if cfg.init_from:
        model = type(model).from_pretrained(cfg.init_from)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    state_path = out / "train_state.pt"
    start, elapsed0 = resume(cfg, state_path, model, opt, dev)
    n_params = sum(p.numel() for p in model.parameters())
    batches = batches_for(cfg, tokenizer, start)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + start)
    log = TrainLog(out, start, ["step", "loss", "lr", "blanks_lo", "blanks_hi", "elapsed_s", "eval_solved", "eval_tpf"])
    model.train()
    run_loss, run_n, step = 0.0, 0, start
    schedule = Schedule(cfg, opt, start, elapsed0, f"train {cfg.kind}")
    for step, frac, lr in schedule:
        with autocast(cfg, dev):
            loss = batches.loss(model, cfg, frac, gen, dev)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        run_loss, run_n = run_loss + loss.item(), run_n + 1
        done = step + 1
        ev = {}
        last = schedule.is_last(done)
        if cfg.eval_every and (done % cfg.eval_every == 0 or last):
            ev = quick_eval(model, cfg, tokenizer, cfg.eval_puzzles)
        if done % cfg.log_every == 0 or ev or last:
            lo, hi = batches.range_at(frac)
            elapsed = schedule.elapsed()
            log.row(
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
            schedule.bar.set_postfix(
                loss=f"{run_loss / run_n:.4f}", blanks=f"{lo}-{hi}", **{k: f"{v:.3f}" for k, v in ev.items()}
            )
            run_loss, run_n = 0.0, 0
        if done % cfg.save_every == 0 or last:
            meta = {"step": done, "elapsed_s": schedule.elapsed(), "num_parameters": n_params}
            save(model, tokenizer, out, cfg, meta)
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "step": done, "elapsed_s": meta["elapsed_s"]},
                state_path,
            )
        if last:
            break
    log.close()
    final = {"step": step + 1, "elapsed_s": schedule.elapsed(), "num_parameters": n_params}
    if state_path.exists():
        state_path.unlink()  # optimizer state is only for resuming; shipped checkpoints stay small
    return final


def run(cfg: TrainConfig) -> dict:
    """One recipe: LoRA fine-tuning when `lora` is set (evals.sudoku.finetune), else training from scratch."""
    if cfg.lora is not None:
        return train_lora(cfg)
    return train(cfg)


def main(dc: DictConfig) -> None:
    """The body of every training entry (`python -m harness.train`, and this module's alias)."""
    cfg = config_from(dc)
    print(json.dumps(asdict(cfg)))
    print(json.dumps(run(cfg)))


@hydra.main(config_path="../../conf", config_name="train", version_base="1.3")
def _alias_main(dc: DictConfig) -> None:
    main(dc)


if __name__ == "__main__":
    register_train_configs()
    _alias_main()  # same as `python -m harness.train`
