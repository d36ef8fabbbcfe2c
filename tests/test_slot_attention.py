"""`models.cache.slot_attention`: grouped-query attention under a mask reads K/V at their own heads (no `repeat_kv`) and
gives transformers' `sdpa` result."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from models.cache import slot_attention
from models.cache.slot_attention import gqa_packed_sdpa, slot_sdpa


class _Attn(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, False


def _inputs(b, kv_heads, groups, n, s, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, n, kv_heads * groups, d, generator=g).transpose(1, 2)  # as the layers hand it over
    k = torch.randn(b, kv_heads, s, d, generator=g)
    v = torch.randn(b, kv_heads, s, d, generator=g)
    return q, k, v


def _mask(b, n, s, causal: bool, seed=0):
    g = torch.Generator().manual_seed(seed)
    if causal:
        seen = torch.arange(s)[None, None, None, :] <= (s - n + torch.arange(n))[None, None, :, None]
        seen = seen.expand(b, 1, n, s) & (torch.rand(b, 1, n, s, generator=g) > 0.2)
    else:
        seen = torch.rand(b, 1, 1, s, generator=g) > 0.3
    seen[..., -1] = True  # every query sees a key
    return torch.zeros(seen.shape).masked_fill_(~seen, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads,groups,d", [(2, 8, 32), (8, 2, 16), (1, 4, 8)])
def test_packed_gqa_equals_transformers_sdpa(causal, kv_heads, groups, d):
    b, n, s = 3, 5, 23
    q, k, v = _inputs(b, kv_heads, groups, n, s, d)
    mask = _mask(b, n, s, causal)
    want, _ = sdpa_attention_forward(_Attn(groups), q, k, v, mask, scaling=0.7)  # repeat_kv on the CPU
    got = gqa_packed_sdpa(q, k, v, mask, groups, scaling=0.7)
    assert got.shape == want.shape == (b, n, kv_heads * groups, d)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the layers' entry point takes the packed path for a masked grouped-query call
    torch.testing.assert_close(slot_sdpa(_Attn(groups), q, k, v, mask, scaling=0.7)[0], got, rtol=0, atol=0)


def test_rows_read_in_place_take_the_packed_path_per_row():
    q, k, v = _inputs(2, 2, 4, 4, 11, 8)
    mask = _mask(2, 4, 11, causal=True)
    keys, values = torch.cat([k[1:], torch.zeros_like(k[:1]), k[:1]]), torch.cat([v[1:], v[:1] * 0, v[:1]])
    setattr(keys, slot_attention.ROWS, [2, 0])  # query row 0 reads slot row 2, query row 1 slot row 0
    got, _ = slot_sdpa(_Attn(4), q, keys, values, mask, scaling=1.0)
    want, _ = sdpa_attention_forward(_Attn(4), q, k, v, mask, scaling=1.0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_no_kv_copy_at_the_query_heads(monkeypatch):
    """The packed path never repeats K/V: transformers' `repeat_kv` is not called."""
    import transformers.integrations.sdpa_attention as sdpa

    calls = []
    real = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda *a: calls.append(a) or real(*a))  # counts, then repeats
    q, k, v = _inputs(1, 2, 8, 4, 9, 8)
    slot_sdpa(_Attn(8), q, k, v, _mask(1, 4, 9, causal=True), scaling=1.0)
    assert calls == []
