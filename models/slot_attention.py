"""Attention that reads a `SlotCache`'s rows in place: no gathered copy of K/V when a forward runs some rows.

A forward over rows that are not 0..b-1 (a commit by a few rows of the batch, the prefill of rows that were
just admitted, the busy rows at the end of a run) would otherwise need their K/V as one dense batch, a copy of
every context those rows attend to in every layer. Under this attention implementation the cache hands the
layers its whole buffer (a view) tagged with the rows, and each query row attends its own slot row, a view
too. It is transformers' `sdpa` otherwise, and is registered under `slot_sdpa` for transformers' attention
layers to look up (`AttentionInterface`).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

NAME = "slot_sdpa"
ROWS = "slot_rows"  # attribute of the key view the cache returns: the slot row of each query row


def slot_sdpa(module, query, key, value, attention_mask, **kwargs):
    rows = getattr(key, ROWS, None)
    if rows is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outs = [
        sdpa_attention_forward(
            module,
            query[i : i + 1],
            key[r : r + 1],
            value[r : r + 1],
            None if attention_mask is None else attention_mask[i : i + 1],
            **kwargs,
        )[0]
        for i, r in enumerate(rows)
    ]
    return torch.cat(outs, 0), None


AttentionInterface.register(NAME, slot_sdpa)
if NAME not in ALL_MASK_ATTENTION_FUNCTIONS:
    AttentionMaskInterface.register(NAME, sdpa_mask)


def install(model) -> bool:
    """Switch a model that runs `sdpa` to `slot_sdpa` (True); any other implementation is left as it is (False),
    and a cache over it then gathers the rows of such forwards (`SlotCache.bytes_gathered`)."""
    configs = [model.config, *(getattr(model.config, k, None) for k in ("text_config",))]
    current = {getattr(c, "_attn_implementation", None) for c in configs if c is not None}
    if current - {"sdpa", NAME}:
        return False
    for c in configs:
        if c is not None:
            c._attn_implementation = NAME
    return True
