"""The reference mode's context (`sampler.random_stream=reference`): transformers' own cache, masks and encoder.

`generate()` encodes the whole prompt in one forward into a `DynamicCache`, whose sliding layers hand each forward
the last `window - 1` context K/V in order, followed by the new ones; the denoiser concatenates its canvas after them.
The slot cache (`models.cache.slot_cache`) prefills in canvas-sized chunks and keeps a sliding layer's K/V in a ring, so
past the window its softmax sums the same terms in another order and over more (masked) slots: logits that differ
by rounding, and random weights turn that into other tokens. This state keeps transformers' order of operations
(one prefill forward, the cache layout, the mask builders, the eager encoder), so the lockstep loop equals
`generate()` token for token where `generate()` can run (prompts of one length; see the README's Reproducibility).
Prompts of several lengths are left-padded with per-row positions, each row at the positions it has alone.
Memory is not its concern: the continuous path keeps the slot cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache


@dataclass
class ReferenceState:
    """A lockstep batch's contexts in transformers' `DynamicCache`: row r's cached entries are right-aligned,
    `mask` (B, T) is False on the left padding, `next_position` (B,) is the position of each row's next token."""

    cache: DynamicCache
    mask: torch.Tensor
    next_position: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.mask.shape[0]

    def begin_canvas(self, b: int, c: int, device) -> torch.Tensor:
        """The (b, c) positions of the canvases after the contexts; nothing is written (transformers' decoder
        concatenates its K/V after the cache's)."""
        return self.next_position[:b, None] + torch.arange(c, device=device)


def prefill(adapter, prompts: list[list[int]]) -> ReferenceState:
    """Encode the prompts, left-padded to the longest, in one causal forward into a fresh `DynamicCache`."""
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    ids = torch.full((len(prompts), width), adapter.pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = True
    ids, mask = ids.to(adapter.device), mask.to(adapter.device)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=adapter.config.get_text_config(decoder=True))
    _encode(adapter, ids, mask, positions, cache)
    return ReferenceState(cache, mask, torch.tensor(lengths, device=adapter.device))


def commit(adapter, state: ReferenceState, canvas: torch.Tensor) -> ReferenceState:
    """Append every row's finished canvas (B, C) to its context: one causal forward over the cache, as
    `generate()` re-encodes a canvas."""
    c = canvas.shape[1]
    mask = torch.nn.functional.pad(state.mask, (0, c), value=True)
    _encode(adapter, canvas, mask, state.begin_canvas(state.batch_size, c, canvas.device), state.cache)
    return ReferenceState(state.cache, mask, state.next_position + c)


def canvas_masks(adapter, state: ReferenceState, c: int) -> dict:
    """transformers' decoder masks for canvases of c positions after the contexts (the cache's sliding layers
    hold at most `window - 1` entries, so the masks are as long as what they hand the decoder)."""
    mask = torch.nn.functional.pad(state.mask, (0, c), value=True)
    dummy = torch.empty((mask.shape[0], c, 1), device=mask.device)
    return adapter.model.model.decoder.create_diffusion_decoder_attention_mask(
        config=adapter.config, inputs_embeds=dummy, past_key_values=state.cache, decoder_attention_mask=mask
    )


def _encode(adapter, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: DynamicCache) -> None:
    """transformers' encoder forward with the masks `generate()` builds for it (`mask`: the 2D mask over the cache
    and the new ids)."""
    encoder = adapter.model.model.encoder
    dummy = torch.empty((*ids.shape, 0), dtype=adapter.dtype, device=ids.device)
    masks = encoder.create_masks_for_generate(
        config=adapter.config, inputs_embeds=dummy, attention_mask=mask, past_key_values=cache, position_ids=positions
    )
    encoder(input_ids=ids.contiguous(), attention_mask=masks, past_key_values=cache, position_ids=positions)
