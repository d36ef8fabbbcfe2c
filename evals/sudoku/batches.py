"""Where a from-scratch training step's batch and loss come from (`TrainConfig.task`):

- `SudokuBatches`: the puzzle stream (`evals.sudoku.stream`), fixed-length digit prompts and answers, no padding;
- `TwinBatches`: the ParallelBench twin's stream (`evals.parallelbench.train_data`), chat prompts of every length.
  Diffusion: left-padded prompts, the reply on one canvas padded after its stop token (the LoRA trainer's
  `diffusion_batch`); AR: next-token loss on the reply tokens only (as the Sudoku AR baseline); masked: the row laid
  out as the masked engine decodes it (blocks aligned at position 0, the reply followed by stop tokens up to the
  eval's generation length and on to its block's end), right-padded, noise on the reply region only.
Both give `loss(model, cfg, frac, gen, dev)` and `range_at(frac)` (the curriculum's blank range, logged).
"""

from __future__ import annotations

import torch

from evals.sudoku.data import Example
from evals.sudoku.finetune import diffusion_batch, pad_left
from evals.sudoku.masked import masked_loss
from evals.sudoku.recipe import TrainConfig, objective
from evals.sudoku.stream import Curriculum, PuzzleStream
from models.masked_diffusion import block_mask
from models.training.objectives import Batch, block_diffusion_loss


class DigitCodec:
    """Digit strings <-> token ids of the char tokenizer, via a lookup table (fast, no tokenizer call)."""

    def __init__(self, tokenizer):
        ids = tokenizer.convert_tokens_to_ids(list("0123456789"))
        self.table = torch.tensor(ids, dtype=torch.long)

    def encode(self, strings: list[str], device) -> torch.Tensor:
        digits = torch.tensor([[ord(ch) - 48 for ch in s] for s in strings], dtype=torch.long)
        return self.table[digits].to(device)


def ar_loss(model, prompt: torch.Tensor, clean: torch.Tensor):
    ids = torch.cat([prompt, clean], dim=1)
    labels = ids.clone()
    labels[:, : prompt.shape[1]] = -100
    return model(input_ids=ids, labels=labels).loss


def recipe_loss(model, cfg: TrainConfig, prompt: torch.Tensor, clean: torch.Tensor, gen: torch.Generator):
    """The training loss of `cfg.kind` on one batch of puzzles (`prompt`) and their solutions (`clean`)."""
    if cfg.kind == "diffusion":
        return block_diffusion_loss(model, objective(cfg), Batch(prompt, clean), gen)[0]
    if cfg.kind == "masked":
        return masked_loss(model, prompt, clean, gen, (cfg.t_min, cfg.t_max))
    return ar_loss(model, prompt, clean)


class SudokuBatches:
    def __init__(self, cfg: TrainConfig, tokenizer, start: int):
        self.curriculum = Curriculum(tuple(cfg.curriculum_start), tuple(cfg.curriculum_end), cfg.curriculum_ramp)
        self.stream = PuzzleStream(
            cfg.size, self.curriculum, seed=cfg.seed + start, fresh_per_batch=cfg.fresh_per_batch
        )
        self.codec = DigitCodec(tokenizer)

    def range_at(self, frac: float) -> tuple[int, int]:
        return self.curriculum.range_at(frac)

    def loss(self, model, cfg: TrainConfig, frac: float, gen: torch.Generator, dev) -> torch.Tensor:
        puzzles, solutions = self.stream.batch(frac, cfg.batch_size)
        prompt, clean = self.codec.encode(puzzles, dev), self.codec.encode(solutions, dev)
        return recipe_loss(model, cfg, prompt, clean, gen)


def reply_loss(model, examples: list[Example], pad: int, device) -> torch.Tensor:
    """AR: next-token cross-entropy on the reply tokens (stop token included) after left-padded prompts."""
    ids, mask = pad_left([e.prompt + e.response for e in examples], pad)
    target = torch.zeros_like(mask)
    for i, e in enumerate(examples):
        target[i, ids.shape[1] - len(e.response) :] = True
    ids, mask, target = ids.to(device), mask.to(device), target.to(device)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask.long(), position_ids=positions).logits
    labels = ids[:, 1:].masked_fill(~target[:, 1:], -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def masked_rows(examples: list[Example], block: int, pad: int, stop: int) -> tuple[torch.Tensor, ...]:
    """(ids, valid, reply) of right-padded rows: prompt, reply, stop tokens up to the generation length and on to the
    end of that block (the masked engine's visible tail)."""
    rows, spans = [], []
    for e in examples:
        end = len(e.prompt) + max(e.length, len(e.response))
        end = -(-end // block) * block
        rows.append(e.prompt + e.response + [stop] * (end - len(e.prompt) - len(e.response)))
        spans.append((len(e.prompt), end))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    valid = torch.zeros((len(rows), width), dtype=torch.bool)
    reply = torch.zeros_like(valid)
    for i, (r, (lo, hi)) in enumerate(zip(rows, spans, strict=True)):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        valid[i, : len(r)] = True
        reply[i, lo:hi] = True
    return ids, valid, reply


def masked_reply_loss(model, examples: list[Example], pad: int, gen: torch.Generator, t_range, device):
    """The masked objective (`evals.sudoku.masked.masked_loss`) on `masked_rows`: reply positions masked with
    probability t ~ U(t_range) per row, cross-entropy on the masked ones, block-causal from position 0."""
    cfg = model.config
    ids, valid, reply = masked_rows(examples, cfg.block_length, pad, cfg.eos_token_id)
    b, n = ids.shape
    lo, hi = t_range
    t = lo + (hi - lo) * torch.rand(b, 1, generator=gen)
    masked = (torch.rand(b, n, generator=gen) < t) & reply
    ids, valid, masked = ids.to(device), valid.to(device), masked.to(device)
    noisy = torch.where(masked, torch.full_like(ids, cfg.mask_token_id), ids)
    pos = torch.arange(n, device=device).expand(b, -1)
    attn = block_mask(pos, pos, valid, cfg.block_length, True)
    logits = model(input_ids=noisy, attention_mask=attn, position_ids=pos).logits
    if not masked.any():
        return logits.sum() * 0.0
    return torch.nn.functional.cross_entropy(logits[masked].float(), ids[masked])


class TwinBatches:
    def __init__(self, cfg: TrainConfig, tokenizer, start: int):
        from evals.parallelbench.tasks import GENERATED
        from evals.parallelbench.train_data import TwinStream

        self.stream = TwinStream(tokenizer, cfg.pb_tasks or GENERATED, seed=cfg.seed + start)
        self.pad = tokenizer.pad_token_id

    def range_at(self, frac: float) -> tuple[str, str]:
        return "", ""

    def loss(self, model, cfg: TrainConfig, frac: float, gen: torch.Generator, dev) -> torch.Tensor:
        examples = self.stream.batch(cfg.batch_size)
        if cfg.kind == "diffusion":
            batch = diffusion_batch(examples, self.pad, model.config.canvas_length, dev)
            return block_diffusion_loss(model, objective(cfg), batch, gen)[0]
        if cfg.kind == "masked":
            return masked_reply_loss(model, examples, self.pad, gen, (cfg.t_min, cfg.t_max), dev)
        return reply_loss(model, examples, self.pad, dev)


def batches_for(cfg: TrainConfig, tokenizer, start: int):
    if cfg.task == "sudoku":
        return SudokuBatches(cfg, tokenizer, start)
    if cfg.task == "parallelbench":
        if cfg.eval_every:
            raise ValueError("eval_every: the in-training probe is Sudoku's; set 0 for task=parallelbench")
        return TwinBatches(cfg, tokenizer, start)
    raise ValueError(f"task: must be 'sudoku' or 'parallelbench', got {cfg.task!r}")
