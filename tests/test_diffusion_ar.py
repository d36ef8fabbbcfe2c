"""The DiffusionGemma weights decoding autoregressively: cached incremental decoding equals recomputing the
whole prefix each step, batches do not change a sample, and the TPF rule gives 1."""

from __future__ import annotations

import torch

from contract.records import GenerationRequest
from harness.engine.decoders import decoder_for
from models.diffusion_gemma_ar import DiffusionGemmaARDecoder

PROMPTS = ["hi", "a longer prompt here", "mid size"]


def test_cached_greedy_decoding_equals_full_recompute(medium_diffusion_dir):
    dec = decoder_for(DiffusionGemmaARDecoder(path=str(medium_diffusion_dir), dtype="float32", eos_token_ids=[1]), None)
    a = dec.model.adapter
    for p in PROMPTS:
        ids = a.encode(p)
        [res] = dec.generate([GenerationRequest("x", ids, seed=0, max_new_tokens=12)])
        assert res.nfe == len(res.token_ids) > 0 and res.tpf == 1.0
        seq = list(ids)
        for tok in res.token_ids:  # no cache reuse: the whole prefix through the encoder again
            expect = int(a.next_token_logits(a.prefill([seq])).argmax(-1))
            assert tok == expect
            seq.append(tok)


def test_batch_does_not_change_a_sample(medium_diffusion_dir):
    dec = decoder_for(DiffusionGemmaARDecoder(path=str(medium_diffusion_dir), dtype="float32", eos_token_ids=[1]), None)
    reqs = [GenerationRequest(f"s{i}", dec.encode(p), seed=i, max_new_tokens=6 + 3 * i) for i, p in enumerate(PROMPTS)]
    together = dec.generate(reqs)
    alone = [dec.generate([r])[0] for r in reqs]
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert [len(r.token_ids) for r in together] == [6, 9, 12]  # rows stop at their own max_new_tokens
    # continuous batching: a finished row leaves; rows up to the highest one in flight are computed while more
    # than half of them are busy, then only the busy ones
    assert [r.nfe for r in together] == [6, 9, 12]
    assert sum(r.row_forwards for r in together) == 6 * 3 + 3 * 3 + 3 * 1
    assert torch.is_tensor(dec.model.adapter.next_token_logits(dec.model.adapter.prefill([reqs[0].prompt_ids])))
