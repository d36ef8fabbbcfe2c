"""Attention that reads a `SlotCache`'s rows in place: no gathered copy of K/V when a forward runs some rows.

A forward over rows that are not 0..b-1 (a commit by a few rows of the batch, the prefill of rows that were
just admitted, the busy rows at the end of a run) would otherwise need their K/V as one dense batch, a copy of
every context those rows attend to in every layer. Under this attention implementation the cache hands the
layers its whole buffer (a view) tagged with the rows, and each query row attends its own slot row, a view
too. It is transformers' `sdpa` otherwise, and is registered under `slot_sdpa` for transformers' attention
layers to look up (`AttentionInterface`).

Grouped-query attention under a mask: transformers' `sdpa` repeats each K/V head for its query heads
(`repeat_kv`, a copy of the whole span: 8x the full layers' K/V at DiffusionGemma's 16 / 2 heads) because CUDA's
masked kernels take no `enable_gqa`. Here a K/V head's query heads are stacked along the query axis instead
(`gqa_packed_sdpa`): the same dot products and softmax rows, K/V read once at their own heads; what is copied
is the mask (a block mask (b, 1, 1, span) not at all; a causal one g times, C / (2 x heads x dim) of the K/V).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward, use_gqa_in_sdpa
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

NAME = "slot_sdpa"
ROWS = "slot_rows"  # attribute of the key view the cache returns: the slot row of each query row


@dataclass
class JointMask:
    """The attention mask of a forward that runs two kinds of batch entries over one cache
    (`harness.engine.step_graph`'s
    step with a commit folded in): entries 0..b-1 are the canvases of slot rows 0..b-1 (`block` (b, 1, 1, span):
    bidirectional), the rest re-encode finished canvases causally into slot rows `rows` (`causal` (k, 1, n, span)).
    The key / value handed over are the whole buffers: the canvases read theirs in place, the re-encodes gather
    their k rows (one read of those rows' K/V per layer), so no row's K/V is copied for the canvases."""

    block: torch.Tensor
    causal: torch.Tensor
    rows: torch.Tensor


def slot_sdpa(module, query, key, value, attention_mask, **kwargs):
    if isinstance(attention_mask, JointMask):
        m, b = attention_mask, attention_mask.block.shape[0]
        canvas, _ = _sdpa(module, query[:b], key[:b], value[:b], m.block, **kwargs)
        commit, _ = _sdpa(module, query[b:], key[m.rows], value[m.rows], m.causal, **kwargs)
        return torch.cat([canvas, commit]), None
    rows = getattr(key, ROWS, None)
    if rows is None:
        return _sdpa(module, query, key, value, attention_mask, **kwargs)
    outs = [
        _sdpa(
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


def _sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' `sdpa`, with its masked grouped-query case packed (`gqa_packed_sdpa`)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups > 1
        and attention_mask is not None
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1
        and kwargs.get("position_bias") is None
        and not use_gqa_in_sdpa(attention_mask, key, value)
    ):
        dropout = kwargs.get("dropout", 0.0)
        return gqa_packed_sdpa(query, key, value, attention_mask, groups, kwargs.get("scaling"), dropout), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def gqa_packed_sdpa(query, key, value, mask, groups: int, scaling: float | None = None, dropout: float = 0.0):
    """SDPA of query (b, kv_heads x groups, n, d) over key / value (b, kv_heads, s, d) with an additive or boolean
    mask (b, 1, n or 1, s): each K/V head's `groups` query heads (heads h*groups .. h*groups + groups - 1, as
    `repeat_kv` pairs them) stacked along the query axis. Returns (b, n, heads, d), as transformers' `sdpa`."""
    b, heads, n, d = query.shape
    q = query.reshape(b, key.shape[1], groups * n, d)
    if mask.shape[2] != 1:  # query j*n + i of a stacked head is query i
        mask = mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling, is_causal=False
    )
    return out.reshape(out.shape[0], heads, n, value.shape[-1]).transpose(1, 2).contiguous()


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
