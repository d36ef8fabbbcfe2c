"""Our block-diffusion loop vs transformers' generate(): token for token, TPF for TPF (reference mode),
and batch invariance in the default per-sample mode."""

from __future__ import annotations

import pytest
import torch

from contract.records import GenerationRequest
from harness.engine.decode import BlockDiffusionDecoder
from samplers.config import EntropyBoundConfig

PROMPTS = ["hello wo", "abcdefgh", "12345678", "qwertyui"]


def _generate_hf(adapter, ids, seed, max_new_tokens, **kw):
    torch.manual_seed(seed)
    out = adapter.model.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=1, pad_token_id=0, **kw)
    rows = []
    for i in range(ids.shape[0]):
        new = out.sequences[i, ids.shape[1] :].tolist()
        rows.append(([t for t in new if t != 0], float(out.tokens_per_forward[i])))
    return rows


def _generate_ours(adapter, ids, seed, max_new_tokens, **knobs):
    torch.manual_seed(seed)
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(random_stream="reference", draw="exact", **knobs))
    reqs = [
        GenerationRequest(str(i), ids[i].tolist(), seed=0, max_new_tokens=max_new_tokens) for i in range(ids.shape[0])
    ]
    return dec.generate(reqs)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny_diffusion_dir", "medium_diffusion_dir", "sharp_diffusion_dir"])
@pytest.mark.parametrize("batch", [1, 4])
def test_reference_mode_matches_generate(request, adapter_factory, which, batch):
    adapter = adapter_factory(request.getfixturevalue(which))
    ids = torch.tensor([adapter.tokenizer(p).input_ids for p in PROMPTS[:batch]])
    steps_seen = set()
    for seed in range(3):
        hf = _generate_hf(adapter, ids, seed, max_new_tokens=32)
        ours = _generate_ours(adapter, ids, seed, max_new_tokens=32)
        for (hf_tokens, hf_tpf), res in zip(hf, ours):
            assert res.token_ids == hf_tokens
            assert res.tpf == pytest.approx(hf_tpf, rel=1e-6)
            steps_seen.update(res.steps_per_canvas)
    if which == "sharp_diffusion_dir":
        assert max(steps_seen) < 48  # early stops were exercised


@pytest.mark.slow
def test_reference_mode_matches_generate_when_rows_end_inside_canvases(adapter_factory, tiny_diffusion_dir):
    """Eleven EOS ids on a random model: rows end at different canvases and positions (generate() pads after
    the EOS before re-encoding, and rows done earlier commit pads); tokens and TPF still match."""
    eos = [1, *range(40, 50)]
    adapter = adapter_factory(tiny_diffusion_dir, eos=eos)
    ids = torch.tensor([adapter.tokenizer(p).input_ids for p in PROMPTS])
    ends = []
    for seed in range(2):
        torch.manual_seed(seed)
        out = adapter.model.generate(ids, max_new_tokens=32, max_denoising_steps=4, eos_token_id=eos, pad_token_id=0)
        hf = [[t for t in out.sequences[i, ids.shape[1] :].tolist() if t != 0] for i in range(ids.shape[0])]
        ours = _generate_ours(adapter, ids, seed, max_new_tokens=32, max_steps=4)
        assert [r.token_ids for r in ours] == hf
        assert [r.tpf for r in ours] == pytest.approx([float(t) for t in out.tokens_per_forward])
        ends += [(r.finished_by, len(r.steps_per_canvas)) for r in ours]
    assert sum(reason == "eos" for reason, _ in ends) >= 4 and len({n for _, n in ends}) > 1


@pytest.mark.slow
def test_reference_mode_matches_generate_with_knobs(adapter_factory, medium_diffusion_dir):
    """Other step counts, bounds and temperatures map onto generate()'s knobs one to one."""
    adapter = adapter_factory(medium_diffusion_dir)
    ids = torch.tensor([adapter.tokenizer(p).input_ids for p in PROMPTS[:2]])
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    hf = _generate_hf(
        adapter,
        ids,
        7,
        24,
        max_denoising_steps=10,
        t_max=1.0,
        t_min=0.2,
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.5),
    )
    ours = _generate_ours(adapter, ids, 7, 24, max_steps=10, t_max=1.0, t_min=0.2, entropy_bound=0.5)
    assert [r.token_ids for r in ours] == [h[0] for h in hf]
    assert [r.tpf for r in ours] == pytest.approx([h[1] for h in hf])


@pytest.mark.slow
@pytest.mark.parametrize("draw", ["exact", "fast"])
def test_per_sample_mode_is_batch_invariant(adapter_factory, medium_diffusion_dir, draw):
    """Batch 1 vs batch 4 with prompts of different lengths (left padding): identical per-sample outputs."""
    adapter = adapter_factory(medium_diffusion_dir)
    prompts = ["hi", "a longer prompt here", "mid size", "x"]
    reqs = [
        GenerationRequest(f"s{i}", adapter.encode(p), seed=100 + i, max_new_tokens=24) for i, p in enumerate(prompts)
    ]
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(draw=draw))
    together = dec.generate(reqs)
    alone = [dec.generate([r])[0] for r in reqs]
    for a, b in zip(together, alone):
        assert a.token_ids == b.token_ids
        assert a.nfe == b.nfe and a.steps_per_canvas == b.steps_per_canvas
    assert len({tuple(r.token_ids) for r in alone}) > 1  # different samples really differ


def test_same_seed_same_output_different_seed_differs(adapter_factory, tiny_diffusion_dir):
    adapter = adapter_factory(tiny_diffusion_dir)
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(draw="exact", max_steps=4))
    ids = adapter.encode("hello")
    a = dec.generate([GenerationRequest("a", ids, seed=1, max_new_tokens=8)])[0]
    b = dec.generate([GenerationRequest("a", ids, seed=1, max_new_tokens=8)])[0]
    c = dec.generate([GenerationRequest("a", ids, seed=2, max_new_tokens=8)])[0]
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids
