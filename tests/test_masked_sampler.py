"""The masked family's rule against diffusers' BlockRefinementScheduler on identical logits, and its configs."""

from __future__ import annotations

import pytest
import torch
from diffusers import BlockRefinementScheduler

from samplers import streams
from samplers.config import SamplerConfigError
from samplers.masked import (
    MASKED_SAMPLERS,
    BlockRefinementConfig,
    FastDllmConfig,
    ReMDMConfig,
    draw,
    filtered_logits,
    refine,
    remask,
    transfer_schedule,
)

MASK, B, L, V = 7, 4, 8, 40


def _case(seed: int):
    """Logits sharp enough that some confidences pass the thresholds, a block with masks, committed tokens and
    prompt positions (the first two positions of the block)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, L, V, generator=g) * 4
    block = torch.randint(0, V, (B, L), generator=g)
    block = block.masked_fill(torch.rand(B, L, generator=g) < 0.6, MASK)
    block[0] = MASK  # one row fully masked
    prompt = torch.zeros(L, dtype=torch.bool)
    prompt[:2] = True
    block[:, :2] = torch.randint(10, V, (B, 2), generator=g)
    return logits, block, prompt


def _scheduler(steps: int) -> BlockRefinementScheduler:
    s = BlockRefinementScheduler(block_length=L, num_inference_steps=steps)
    s.set_timesteps(steps, block_length=L)
    return s


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step", [0, 2, 5])
@pytest.mark.parametrize("thr,edit", [(0.5, None), (0.5, 0.3), (0.95, 0.6), (0.0, None)])
def test_greedy_step_equals_block_refinement_scheduler(seed, step, thr, edit):
    logits, block, prompt = _case(seed)
    steps = 4
    ref = _scheduler(steps).step(
        logits, step, block.clone(), mask_token_id=MASK, temperature=0.0, threshold=thr, editing_threshold=edit,
        prompt_mask=prompt,
    )  # fmt: skip
    cfg = BlockRefinementConfig(threshold=thr, editing_threshold=edit, steps_per_block=steps)
    tok, p = draw(logits, cfg, None)
    assert torch.equal(tok, ref.sampled_tokens) and torch.equal(p, ref.sampled_probs)
    n = torch.full((B,), transfer_schedule(L, steps)[min(step, steps - 1)])
    new, fill, edited = refine(block, tok, p, n, ~prompt.expand(B, L), MASK, thr, edit)
    assert torch.equal(fill, ref.transfer_index)
    assert torch.equal(edited, ref.editing_transfer_index)
    assert torch.equal(new, ref.prev_sample)
    assert fill.any()  # the case exercises the rule


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("top_k,top_p", [(None, None), (10, None), (None, 0.8), (12, 0.9)])
def test_sampled_step_equals_block_refinement_scheduler(seed, top_k, top_p):
    """diffusers draws with torch.multinomial, so the tokens it drew are fed to our rule: the probabilities of the
    filtered distribution at those tokens and every commit / edit decision must be the same."""
    logits, block, prompt = _case(seed)
    g = torch.Generator().manual_seed(100 + seed)
    ref = _scheduler(4).step(
        logits, 1, block.clone(), mask_token_id=MASK, temperature=0.7, top_k=top_k, top_p=top_p,
        sampling_method="multinomial", threshold=0.4, editing_threshold=0.5, prompt_mask=prompt, generator=g,
    )  # fmt: skip
    probs = torch.softmax(filtered_logits(logits, 0.7, top_k, top_p).float(), -1)
    p = probs.gather(-1, ref.sampled_tokens[..., None])[..., 0]
    assert torch.equal(p, ref.sampled_probs)
    n = torch.full((B,), transfer_schedule(L, 4)[1])
    new, fill, edited = refine(block, ref.sampled_tokens, p, n, ~prompt.expand(B, L), MASK, 0.4, 0.5)
    assert torch.equal(fill, ref.transfer_index) and torch.equal(edited, ref.editing_transfer_index)
    assert torch.equal(new, ref.prev_sample)


def test_inverse_cdf_draw_follows_the_filtered_distribution():
    """20,000 draws from one row with the stream's uniforms: frequencies match the filtered probabilities (a
    chi-square bound), and tokens outside top-k are never drawn."""
    g = torch.Generator().manual_seed(0)
    row = torch.randn(1, 1, 12, generator=g) * 1.5
    cfg = BlockRefinementConfig(temperature=0.8, top_k=6, top_p=0.95)
    n = 20000
    u = streams.uniforms(torch.tensor([3]), torch.tensor([0]), torch.tensor([0]), n)[0]
    tok, p = draw(row.expand(n, 1, 12).reshape(n, 1, 12), cfg, u[:, None])
    probs = torch.softmax(filtered_logits(row[0, 0], 0.8, 6, 0.95).float(), -1)
    counts = torch.bincount(tok[:, 0], minlength=12).double()
    assert torch.all(counts[probs == 0] == 0)
    keep = probs > 0
    expected = probs[keep].double() * n
    chi2 = ((counts[keep] - expected) ** 2 / expected).sum().item()
    assert chi2 < 25.0, chi2  # about 5 degrees of freedom: p < 1e-3 above 20.5
    assert torch.allclose(p[:, 0], probs[tok[:, 0]])


def test_remask_drops_the_least_confident_committed():
    logits = torch.zeros(1, 4, 5)
    logits[0, torch.arange(4), torch.tensor([1, 2, 3, 4])] = torch.tensor([5.0, 1.0, 3.0, 0.5])
    block = torch.tensor([[1, 2, 3, 4]])
    committed = torch.tensor([[True, True, True, False]])
    out = remask(block, logits, committed, 0.5, MASK)  # floor(3 * 0.5) = 1: position 1 (prob lowest of the three)
    assert out.tolist() == [[1, MASK, 3, 4]]


def test_schedule_is_diffusers():
    s = BlockRefinementScheduler()
    for n, steps in [(8, 3), (32, 32), (4, 8), (5, 2)]:
        assert transfer_schedule(n, steps) == s.get_num_transfer_tokens(n, steps).tolist()


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"threshold": 1.5}, "sampler.threshold"),
        ({"threshold": -0.1}, "sampler.threshold"),
        ({"editing_threshold": 0.0}, "sampler.editing_threshold"),
        ({"steps_per_block": 0}, "sampler.steps_per_block"),
        ({"minimal_topk": 0}, "sampler.minimal_topk"),
        ({"top_p": 0.0}, "sampler.top_p"),
        ({"top_k": 0}, "sampler.top_k"),
        ({"temperature": -1}, "sampler.temperature"),
        ({"remask_ratio": 1.0}, "sampler.remask_ratio"),
        ({"block_length": 0}, "sampler.block_length"),
        ({"max_post_steps": -1}, "sampler.max_post_steps"),
    ],
)
def test_bad_values_name_the_key(kwargs, key):
    with pytest.raises(SamplerConfigError, match=key):
        BlockRefinementConfig(**kwargs)


def test_presets():
    assert set(MASKED_SAMPLERS) == {"block_refinement", "low_confidence", "fast_dllm_masked", "remdm", "llada2_editing"}
    assert FastDllmConfig().threshold == 0.9
    with pytest.raises(SamplerConfigError, match="sampler.remask_ratio"):
        ReMDMConfig(remask_ratio=0.0)
