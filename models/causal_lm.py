"""A causal LM's body and head over a `SlotCache`: what the AR engine and its draft models run.

transformers' `*ForCausalLM` (its `.model` + `lm_head`), a `*ForConditionalGeneration`'s language model, or a
block-diffusion checkpoint's causal body (`encoder=`: DiffusionGemma's encoder + LM head, Nemotron-Labs-Diffusion's
`encoder` + `diffusion_head` given as `head=`): the same weights decoding autoregressively.
"""

from __future__ import annotations

import torch

from models.cache import slot_attention
from models.cache.slot_cache import SlotCache

PREFILL_CHUNK = 512  # positions per prefill forward (the sliding layers' ring holds window - 1 + this)


class CausalLM:
    """A causal LM over per-row KV slots (see the module docstring for what it wraps)."""

    def __init__(self, model, encoder=None, head=None):
        self.model = model
        if encoder is None:
            inner = model.model  # *ForCausalLM: the text model; *ForConditionalGeneration: its language model
            encoder = getattr(inner, "language_model", inner)
        self.body, self.head = encoder, head if head is not None else model.lm_head
        self.text_config = model.config.get_text_config()
        self.softcap = getattr(self.text_config, "final_logit_softcapping", None)
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.vocab_size = self.text_config.vocab_size
        self.embed = model.get_input_embeddings()
        # the body may carry a config of its own (a deep copy in Nemotron-Labs-Diffusion): switch both
        own = getattr(self.body, "config", model.config)
        self.row_indexed = slot_attention.install(model) and (own is model.config or slot_attention.install(self.body))

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
        if not getattr(self.text_config, "layer_types", None):  # one attention kind: the model takes one mask
            (masks,) = masks.values()
        out = self.body(input_ids=ids, attention_mask=masks, position_ids=positions, past_key_values=cache)
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.head(hidden).float()
        return x.div_(self.softcap).tanh_().mul_(self.softcap) if self.softcap else x
