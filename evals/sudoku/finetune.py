"""LoRA fine-tuning of a pretrained Sudoku solver (the DiffusionGemma recipe, and the AR baseline beside it).

Run:  python -m harness.train train=sudoku9_lora          # DiffusionGemma 26B on a GPU (official recipe)
      python -m harness.train train=sudoku9_lora_ar       # Gemma 4 26B A4B, the same recipe, next-token loss
      python -m harness.train train=sudoku4_lora_cpu      # the CPU twin: shipped 6x6 model -> 4x4 puzzles
Then: python -m harness.run model=<base config> model.adapter=<out_dir> eval=...

One code path for every scale: the base (`init_from`: hub id or local folder) loads in `dtype`, gets rank-r
adapters on every linear layer and the MoE experts (`models.loading.lora`: one adapter per weight shared by encoder
and decoder), and only those train: AdamW(`betas`, `adam_eps`, `weight_decay`), gradient clipping, linear
warmup then cosine (`evals.sudoku.recipe.lr_at`), optional gradient checkpointing and bf16 autocast.
Examples come from a `quizzes,solutions` file rendered exactly as the eval renders prompts
(`evals.sudoku.data`). DiffusionGemma's loss is `models.training.objectives.block_diffusion_loss` (uniform-state noise,
one canvas per example, self-conditioning, + `encoder_loss_weight` x the encoder's next-token loss); the AR
baseline's is the next-token loss on the same prompt + response tokens (the diffusion recipe's encoder term).
`out_dir` receives the adapter (peft folder), `train_log.csv` and `train_config.json`; `train_state.pt`
(adapter + optimizer) lets an interrupted run resume, and is removed at the end.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from contract.paths import resolve_model_ref
from evals.sudoku.data import Example, ExampleOrder, load_examples
from evals.sudoku.recipe import Schedule, TrainConfig, TrainLog, autocast, objective, start_run
from models.loading.lora import attach_lora, lora_parameters, save_adapter
from models.training.objectives import Batch, block_diffusion_loss, next_token_loss

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check(cfg: TrainConfig) -> None:
    """Bad recipes fail here, before any model loads."""
    if cfg.kind not in ("diffusion", "ar"):
        raise ValueError(f"kind must be 'diffusion' or 'ar', got {cfg.kind!r}")
    if not cfg.init_from:
        raise ValueError("init_from: the LoRA base model (hub id or local folder) is required when `lora` is set")
    if not cfg.data.path:
        raise ValueError("data.path: required for LoRA fine-tuning (a quizzes,solutions .csv or a .jsonl of puzzles)")
    if cfg.dtype not in DTYPES:
        raise ValueError(f"dtype: must be one of {sorted(DTYPES)}, got {cfg.dtype!r}")
    if not 0 < cfg.t_min < cfg.t_max <= 1:
        raise ValueError(f"t_min / t_max: need 0 < t_min < t_max <= 1, got {cfg.t_min}, {cfg.t_max}")
    if len(cfg.betas) != 2:
        raise ValueError(f"betas: two values, got {cfg.betas}")


def pad_left(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = True
    return ids, mask


def diffusion_batch(examples: list[Example], pad: int, canvas_length: int, device) -> Batch:
    """Left-padded prompts; each response on one canvas, padded after its stop token."""
    prompt, prompt_mask = pad_left([e.prompt for e in examples], pad)
    canvas = torch.full((len(examples), canvas_length), pad, dtype=torch.long)
    real = torch.zeros((len(examples), canvas_length), dtype=torch.bool)
    for i, e in enumerate(examples):
        canvas[i, : len(e.response)] = torch.tensor(e.response, dtype=torch.long)
        real[i, : len(e.response)] = True
    return Batch(prompt.to(device), canvas.to(device), prompt_mask.to(device), real.to(device))


def causal_loss(model, examples: list[Example], pad: int, device) -> torch.Tensor:
    """The AR baseline's loss: next-token cross-entropy over prompt + response (left-padded)."""
    ids, mask = pad_left([e.prompt + e.response for e in examples], pad)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=positions).logits
    return next_token_loss(logits, ids, mask)


def load_base(cfg: TrainConfig, device):
    from transformers import AutoModelForCausalLM, AutoTokenizer, DiffusionGemmaForBlockDiffusion

    ref = resolve_model_ref(cfg.init_from, "init_from")
    cls = DiffusionGemmaForBlockDiffusion if cfg.kind == "diffusion" else AutoModelForCausalLM
    model = cls.from_pretrained(ref, dtype=DTYPES[cfg.dtype]).to(device)
    return model, AutoTokenizer.from_pretrained(ref)


def train_lora(cfg: TrainConfig) -> dict:
    """Fine-tune LoRA adapters on `cfg.init_from`; returns final figures. See the module docstring."""
    check(cfg)
    dev = start_run(cfg)
    out = Path(cfg.out_dir)
    model, tokenizer = load_base(cfg, dev)
    examples = load_examples(cfg.data, cfg.size, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.get_text_config().pad_token_id
    canvas = getattr(model.config, "canvas_length", None)
    if cfg.kind == "diffusion":
        longest = max(len(e.response) for e in examples)
        if longest > canvas:
            raise ValueError(f"data: a response of {longest} tokens does not fit one canvas of {canvas} tokens")
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    peft_model = attach_lora(model, cfg.lora)  # `model` now runs through the adapters; only they train
    params = list(lora_parameters(model).values())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "train_state.pt"
    start, elapsed0 = 0, 0.0
    if cfg.resume and state_path.exists():
        st = torch.load(state_path, map_location=dev, weights_only=False)
        with torch.no_grad():
            for name, p in lora_parameters(model).items():
                p.copy_(st["lora"][name])
        opt.load_state_dict(st["opt"])
        start, elapsed0 = st["step"], st["elapsed_s"]
        print(f"resuming from step {start}")
    order = ExampleOrder(len(examples), cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + start)
    log = TrainLog(out, start, ["step", "loss", "diffusion_loss", "encoder_loss", "lr", "elapsed_s"])
    n_train = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in model.parameters())
    obj = objective(cfg)
    model.train()
    sums: dict[str, float] = {}
    runs, step = 0, start
    schedule = Schedule(cfg, opt, start, elapsed0, f"lora {cfg.kind}")
    for step, _, lr in schedule:
        batch = [examples[i] for i in order.batch(step, cfg.batch_size)]
        with autocast(cfg, dev):
            if cfg.kind == "diffusion":
                loss, parts = block_diffusion_loss(model, obj, diffusion_batch(batch, pad, canvas, dev), gen)
            else:
                loss = causal_loss(model, batch, pad, dev)
                parts = {}
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        for k, v in {"loss": loss.item(), **parts}.items():
            sums[k] = sums.get(k, 0.0) + v
        runs += 1
        done = step + 1
        last = schedule.is_last(done)
        if done % cfg.log_every == 0 or last:
            mean = {k: v / runs for k, v in sums.items()}
            elapsed = schedule.elapsed()
            row = [done] + [f"{mean[k]:.5f}" if k in mean else "" for k in ("loss", "diffusion_loss", "encoder_loss")]
            log.row(row + [f"{lr:.7f}", f"{elapsed:.1f}"])
            schedule.bar.set_postfix(loss=f"{mean['loss']:.4f}")
            sums, runs = {}, 0
        if done % cfg.save_every == 0 or last:
            elapsed = schedule.elapsed()
            save_adapter(peft_model, out)
            meta = {
                "step": done,
                "elapsed_s": elapsed,
                "trainable_parameters": n_train,
                "parameters": n_total,
                "base_commit": getattr(model.config, "_commit_hash", None),  # hub commit loaded (None: local)
            }
            (out / "train_config.json").write_text(json.dumps({**asdict(cfg), **meta}, indent=2))
            lora_state = {k: v.detach().cpu() for k, v in lora_parameters(model).items()}
            torch.save({"lora": lora_state, "opt": opt.state_dict(), "step": done, "elapsed_s": elapsed}, state_path)
        if last:
            break
    log.close()
    if state_path.exists():
        state_path.unlink()  # only for resuming; the adapter folder is the result
    return {
        "step": step + 1,
        "elapsed_s": schedule.elapsed(),
        "trainable_parameters": n_train,
        "parameters": n_total,
        "adapter": str(out),
    }
