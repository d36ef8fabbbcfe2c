"""Training objectives computed outside the model (DiffusionGemma's forward returns no loss).

`block_diffusion_loss` is the uniform-state objective the checkpoints are trained with, one canvas per example:
t ~ U(t_min, t_max) per example; each canvas position is replaced with probability t by a token drawn uniformly
from the whole vocabulary (uniform-state noise, not [MASK]); unweighted cross-entropy over every valid canvas
position (the model must both fill in and spot corrupted tokens, which the entropy-bound sampler relies on).
Self-conditioning: for each example with probability `self_cond_prob`, a no-grad first pass on the same noisy
canvas gives logits, scaled by 1/T (T ~ U(sc_temperature): the sampler feeds temperature-scaled logits), fed to
the second pass through `self_conditioning_mask`. With `encoder_weight > 0` the causal encoder's next-token
cross-entropy on prompt + clean response is added (the official DiffusionGemma fine-tuning recipe, weight 1).
`next_token_loss` is that same next-token term for any causal LM (the AR baseline).

Batches are left-padded prompts (`prompt_mask` False on padding) and canvases of the model's canvas length
(`canvas_real` False on the padding after the response, which is still a target of the diffusion loss: the
committed canvas holds padding after EOS and the model must produce it for the adaptive stop to fire).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class DiffusionObjective:
    t_min: float = 0.02
    t_max: float = 1.0
    self_cond_prob: float = 0.5
    sc_temperature: list[float] = field(default_factory=lambda: [0.6, 0.8])
    encoder_weight: float = 0.0


@dataclass
class Batch:
    """Token ids for one step. `prompt_mask` / `canvas_real` None means every position is a real token."""

    prompt: torch.Tensor  # (B, L) left-padded
    canvas: torch.Tensor  # (B, C) clean canvas: response then padding
    prompt_mask: torch.Tensor | None = None  # (B, L) bool
    canvas_real: torch.Tensor | None = None  # (B, C) bool: response tokens (not the padding after them)


def _masks(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    b, c = batch.canvas.shape
    pm = batch.prompt_mask if batch.prompt_mask is not None else torch.ones_like(batch.prompt, dtype=torch.bool)
    real = batch.canvas_real if batch.canvas_real is not None else torch.ones((b, c), dtype=torch.bool)
    return pm.to(batch.prompt.device), real.to(batch.prompt.device)


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ids[:, i+1] from position i over positions whose target is real."""
    labels = ids[:, 1:].masked_fill(~target_mask[:, 1:], -100)
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def softcapped_lm_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head on hidden states with the model's final-logit softcap, as its own forward applies it."""
    logits = model.lm_head(hidden).float()
    cap = model.config.get_text_config().final_logit_softcapping
    return torch.tanh(logits / cap) * cap if cap else logits


def encoder_next_token_loss(model, batch: Batch) -> torch.Tensor:
    """DiffusionGemma's causal encoder as an LM over prompt + clean response (one causal pass)."""
    pm, real = _masks(batch)
    ids = torch.cat([batch.prompt, batch.canvas], dim=1)
    mask = torch.cat([pm, torch.ones_like(real)], dim=1)  # the committed canvas is encoded whole, padding too
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    hidden = model.model.encoder(input_ids=ids, attention_mask=mask.long(), position_ids=positions).last_hidden_state
    return next_token_loss(softcapped_lm_logits(model, hidden), ids, torch.cat([pm, real], dim=1))


def padded_context(prompt_mask: torch.Tensor, canvas_length: int) -> dict[str, torch.Tensor]:
    """Forward kwargs for left-padded prompts: masks and per-row positions exactly as the decode loop uses them
    (prompt positions 0.., canvas positions right after each row's real prompt)."""
    pm = prompt_mask.long()
    canvas = torch.ones((pm.shape[0], canvas_length), dtype=torch.long, device=pm.device)
    return {
        "attention_mask": pm,
        "position_ids": (pm.cumsum(-1) - 1).clamp(min=0),
        "decoder_attention_mask": torch.cat([pm, canvas], 1),
        "decoder_position_ids": pm.sum(-1, keepdim=True) + torch.arange(canvas_length, device=pm.device),
    }


def block_diffusion_loss(
    model, obj: DiffusionObjective, batch: Batch, gen: torch.Generator
) -> tuple[torch.Tensor, dict[str, float]]:
    """The uniform-state objective (module docstring): (total loss, its parts as floats)."""
    prompt, clean = batch.prompt, batch.canvas
    b, c = clean.shape
    vocab = model.config.get_text_config().vocab_size
    dev = clean.device
    pm, _ = _masks(batch)
    t = obj.t_min + (obj.t_max - obj.t_min) * torch.rand(b, generator=gen).to(dev)
    corrupt = torch.rand(b, c, generator=gen).to(dev) < t[:, None]
    noisy = torch.where(corrupt, torch.randint(0, vocab, (b, c), generator=gen).to(dev), clean)
    sc_mask = (torch.rand(b, generator=gen) < obj.self_cond_prob).to(dev)
    ctx = padded_context(pm, c) if batch.prompt_mask is not None else {}

    def rows(sel):
        return {k: v[sel] for k, v in ctx.items()}

    sc_logits = None
    if sc_mask.any():
        with torch.no_grad():
            first = model(input_ids=prompt[sc_mask], decoder_input_ids=noisy[sc_mask], **rows(sc_mask)).logits.float()
        lo, hi = obj.sc_temperature
        temp = lo + (hi - lo) * torch.rand(first.shape[0], 1, 1, generator=gen).to(dev)
        sc_logits = torch.zeros(b, c, first.shape[-1], device=dev, dtype=first.dtype)
        sc_logits[sc_mask] = first / temp
    logits = model(
        input_ids=prompt,
        decoder_input_ids=noisy,
        self_conditioning_logits=sc_logits,
        self_conditioning_mask=sc_mask if sc_logits is not None else None,
        **ctx,
    ).logits
    diffusion = F.cross_entropy(logits.float().reshape(b * c, -1), clean.reshape(-1))
    parts = {"diffusion_loss": diffusion.item()}
    loss = diffusion
    if obj.encoder_weight:
        enc = encoder_next_token_loss(model, batch)
        parts["encoder_loss"] = enc.item()
        loss = loss + obj.encoder_weight * enc
    return loss, parts
