"""The masked family's memory estimate (`models.planning.masked_memory`, `batch_size=auto`) against the masked
engine's measured
peak on a real small model whose logits dominate (CPU, `LiveBytes` from tests/test_memory.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from models.masked_diffusion import MaskedDiffusionAdapter
from models.planning.masked_memory import estimate_masked_peak, row_cache_slots, trims_lm_head
from models.planning.memory import count_parameters
from models.tiny import MASK, char_tokenizer
from samplers.masked import BlockRefinementConfig
from tests.test_memory import LiveBytes

VOCAB, BLOCK = 8192, 8


@pytest.fixture(scope="module")
def wide_masked(tmp_path_factory):
    """A 2-layer Llama masked model with an 8k vocabulary (logits, not weights, dominate a step), saved once."""
    tok = char_tokenizer()
    tok.add_special_tokens({"mask_token": MASK})
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, pad_token_id=0, eos_token_id=1,
        bos_token_id=2,
    )  # fmt: skip
    cfg.mask_token_id, cfg.block_length = tok.mask_token_id, BLOCK
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("wide_masked")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out, cfg


def test_row_cache_slots_double_from_the_first_need():
    assert row_cache_slots(40, 40, 8) == 64  # at least 64
    assert row_cache_slots(80, 200, 8) == 320  # 80 -> 160 -> 320, a block at a time
    assert row_cache_slots(80, 400, 400) == 400  # a jump past twice the capacity takes the need itself


@pytest.mark.parametrize("context,temperature", [("cache", 0.0), ("cache", 1.0), ("recompute", 0.0)])
def test_estimate_bounds_the_masked_engine(wide_masked, context, temperature):
    """Everything but the weights, measured over a whole decode (admission, prefill, blocks, retire), stays under
    the estimate, and the estimate is within 3x of it."""
    path, cfg = wide_masked
    b, p, new = 4, 21, 40
    ad = MaskedDiffusionAdapter(str(path), dtype="float32", context=context, eos_token_ids=[VOCAB + 1])
    dec = MaskedDiffusionDecoder(ad, BlockRefinementConfig(steps_per_block=4, temperature=temperature))
    requests = [GenerationRequest(str(i), [5 + (i + j) % 50 for j in range(p - i)], i, new) for i in range(b)]
    with LiveBytes(ignore=list(ad.model.parameters()) + list(ad.model.buffers())) as mode:
        dec.generate(requests)
    assert trims_lm_head(cfg)  # Llama takes logits_to_keep: the adapter runs its LM head on the block alone
    context_tokens = -(-(p + new) // BLOCK) * BLOCK
    kw = {"prompt_tokens": p, "context": context, "sampled": temperature > 0, "trims_logits": True}
    est = estimate_masked_peak(cfg, b, context_tokens, BLOCK, 4, **kw)
    assert est.weights == count_parameters(cfg) * 4
    assert mode.peak <= est.total - est.weights <= 3 * mode.peak, (mode.peak, est)
