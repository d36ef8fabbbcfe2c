"""The masked (absorbing-state) Sudoku model: a Gemma 4 text causal LM with a `<|mask|>` token, run block-causally
(`models.masked_diffusion`), and its training objective, the design documents' recipe:

- noise only the answer, never the prompt; per sample `t ~ U(t_min, t_max)` (the recipe: U(0, 1)), each answer
  position replaced by the mask token with probability `t`;
- cross-entropy on the masked positions only (unweighted mean over every masked position of the batch), so the
  model learns to fill blanks from any fraction of context, a fully masked block included (t near 1).

Attention is block-causal with blocks aligned at absolute position 0, as the adapter decodes: with the compact
format the prompt is N*N tokens, so a block length that divides N*N keeps the prompt in whole blocks. The recipe
uses one block for the whole answer (`block_length` null = N*N): a Sudoku cell depends on cells anywhere in the
grid, so the denoiser should see every answer position at once (as DiffusionGemma's one 36-token canvas does); the
exact K/V cache then holds the prompt's block.
"""

from __future__ import annotations

import torch

from models.masked_diffusion import block_mask
from models.tiny import MASK


def add_mask_token(tokenizer) -> int:
    """The char tokenizer plus `<|mask|>` (id 103: inside the 112-row padded vocabulary, so the model keeps the AR
    baseline's parameter count)."""
    tokenizer.add_special_tokens({"mask_token": MASK})
    return tokenizer.mask_token_id


def answer_block(cfg) -> int:
    """The training and decoding block length: the recipe's, or the whole answer (N*N); the ParallelBench twin's
    prompts have every length, so its recipe names one."""
    if getattr(cfg, "task", "sudoku") == "parallelbench":
        if not cfg.block_length:
            raise ValueError("block_length: the parallelbench masked recipe needs one (its prompts have every length)")
        return cfg.block_length
    cells = cfg.size * cfg.size
    n = cfg.block_length or cells
    if cells % n:
        raise ValueError(f"block_length: must divide the {cells} prompt cells (blocks start at position 0), got {n}")
    return n


def build_masked_model(cfg, tokenizer, shape: dict):
    """Gemma4ForCausalLM of the AR baseline's shape; the config carries the adapter's mask id, block length and
    attention, so `conf/model/sudoku6_masked.yaml` needs none of them."""
    from transformers import Gemma4ForCausalLM

    from models.tiny import ar_config, vocab_size_for

    config = ar_config(vocab_size_for(tokenizer), **shape)
    config.mask_token_id = tokenizer.mask_token_id
    config.block_length = answer_block(cfg)
    config.attention = "block_causal"
    return Gemma4ForCausalLM(config)


def masked_loss(
    model, prompt: torch.Tensor, clean: torch.Tensor, gen: torch.Generator, t_range: tuple[float, float]
) -> torch.Tensor:
    """Mean cross-entropy over the masked answer positions of `prompt + masked(clean)` under the block-causal mask."""
    cfg = model.config
    b, n = clean.shape
    lo, hi = t_range
    t = lo + (hi - lo) * torch.rand(b, 1, generator=gen)
    masked = (torch.rand(b, n, generator=gen) < t).to(clean.device)
    noisy = torch.where(masked, torch.full_like(clean, cfg.mask_token_id), clean)
    ids = torch.cat([prompt, noisy], dim=1)
    pos = torch.arange(ids.shape[1], device=ids.device).expand(b, -1)
    attn = block_mask(pos, pos, torch.ones_like(ids, dtype=torch.bool), cfg.block_length, True)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, prompt.shape[1] :]
    if not masked.any():
        return logits.sum() * 0.0  # nothing masked in the whole batch: a zero loss that keeps the graph
    return torch.nn.functional.cross_entropy(logits[masked].float(), clean[masked])


@torch.no_grad()
def confidence_decode(model, prompt: torch.Tensor, cells: int, per_step: int = 4) -> tuple[torch.Tensor, int]:
    """The in-training probe: from a fully masked answer, each forward fills the `per_step` most confident masked
    positions with their argmax (LLaDA's low-confidence rule, whole prefix recomputed). Returns (answers, forwards)."""
    cfg = model.config
    b = prompt.shape[0]
    ans = torch.full((b, cells), cfg.mask_token_id, dtype=torch.long, device=prompt.device)
    ids = torch.cat([prompt, ans], dim=1)
    pos = torch.arange(ids.shape[1], device=ids.device).expand(b, -1)
    attn = block_mask(pos, pos, torch.ones_like(ids, dtype=torch.bool), cfg.block_length, True)
    forwards = 0
    while (ans == cfg.mask_token_id).any():
        logits = model(input_ids=torch.cat([prompt, ans], dim=1), attention_mask=attn, position_ids=pos).logits
        forwards += 1
        prob, tok = logits[:, prompt.shape[1] :].float().softmax(-1).max(-1)
        open_ = ans == cfg.mask_token_id
        score = torch.where(open_, prob, torch.full_like(prob, -1.0))
        k = min(per_step, cells)
        top = score.topk(k, dim=-1).indices
        pick = torch.zeros_like(open_).scatter_(1, top, True) & open_
        ans = torch.where(pick, tok, ans)
    return ans, forwards
