"""A causal LM's body and head over a `SlotCache`: what the AR engine and its draft models run.

transformers' `*ForCausalLM` (its `.model` + `lm_head`), a `*ForConditionalGeneration`'s language model, or
DiffusionGemma's causal encoder + LM head (`encoder=`): the same weights decoding autoregressively.
"""

from __future__ import annotations

import torch

from models import slot_attention
from models.slot_cache import SlotCache

PREFILL_CHUNK = 512  # positions per prefill forward (the sliding layers' ring holds window - 1 + this)


class CausalLM:
    """A causal LM over per-row KV slots (see the module docstring for what it wraps)."""

    def __init__(self, model, encoder=None):
        self.model = model
        inner = model.model  # *ForCausalLM: the text model; *ForConditionalGeneration: its language model
        self.body = encoder if encoder is not None else getattr(inner, "language_model", inner)
        self.text_config = model.config.get_text_config()
        self.softcap = getattr(self.text_config, "final_logit_softcapping", None)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.vocab_size = self.text_config.vocab_size
        self.embed = model.get_input_embeddings()
        self.row_indexed = slot_attention.install(model)

    def new_cache(self, rows: int, capacity: int, max_chunk: int) -> SlotCache:
        return SlotCache(self.text_config, rows, capacity, max_chunk, self.dtype, self.device, self.row_indexed)

    def forward(
        self, cache: SlotCache, rows: list[int] | None, starts: list[int], ids: torch.Tensor, real=None
    ) -> torch.Tensor:
        """Run `ids` (b, n) at positions starts[i].. of rows `rows`, writing their K/V; return hidden (b, n, H).
        `real[i]`: how many of row i's n tokens are its own (the rest pad it to the chunk)."""
        n = ids.shape[1]
        cache.begin(rows, starts, n, real)
        positions = torch.tensor(starts, device=self.device)[:, None] + torch.arange(n, device=self.device)
        masks = cache.masks(positions, self.dtype)
        out = self.body(input_ids=ids, attention_mask=masks, position_ids=positions, past_key_values=cache)
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.model.lm_head(hidden).float()
        return x.div_(self.softcap).tanh_().mul_(self.softcap) if self.softcap else x
