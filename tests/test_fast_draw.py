"""`draw_fast` keeps `draw_exact`'s contract: softmax sampling by inverse CDF of the given uniforms, same argmax /
entropy / confidence, batch invariance; `draw_whole` (the compiled form) gives the same results."""

from __future__ import annotations

import pytest
import torch

import samplers.fast_draw as fd
from samplers.draw import draw_exact
from samplers.fast_draw import draw_fast, draw_whole

# chi-square critical value at p = 1e-4 for df = 9 (10 categories): a correct sampler fails 1 seed in 10,000
CHI2_CRIT_DF9 = 33.72


def _u(shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    n = counts.sum()
    expected = probs.double() * n
    return float(((counts.double() - expected) ** 2 / expected).sum())


def _counts(logits_row: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Draw n samples from one categorical by putting it at n canvas positions of one row."""
    v = logits_row.numel()
    logits = logits_row.expand(1, n, v).contiguous()
    draw = draw_fast(logits, _u((1, n), seed))
    return torch.bincount(draw.sampled.view(-1), minlength=v)


# V = 10 -> chunks of 4 with a ragged tail of 2: both search levels and the tail are exercised
LOGITS = torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0, -3.0, 1.5, 1.0, -0.5, 2.5])


def test_sampling_matches_softmax_chi_square_and_tv():
    probs = torch.softmax(LOGITS, -1)
    counts = _counts(LOGITS, 40_000, seed=123)
    assert _chi2(counts, probs) < CHI2_CRIT_DF9
    tv = 0.5 * (counts.double() / counts.sum() - probs.double()).abs().sum()
    assert tv < 0.01


def test_sampling_spread_over_many_chunks_matches_softmax():
    """V = 1000 (32 chunks of 32, ragged tail of 8): binned chi-square over 20 bins of 50 tokens."""
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(11)) * 1.5
    counts = _counts(logits, 40_000, seed=5).view(20, 50).sum(-1)
    probs = torch.softmax(logits.double(), -1).view(20, 50).sum(-1)
    assert _chi2(counts, probs) < 50.80  # df = 19, p = 1e-4


def test_the_test_rejects_a_wrong_distribution():
    """Samples from a slightly different softmax (temperature 1.15) must fail the same chi-square check."""
    probs = torch.softmax(LOGITS, -1)
    counts = _counts(LOGITS / 1.15, 40_000, seed=123)
    assert _chi2(counts, probs) > CHI2_CRIT_DF9


def test_zero_probability_tokens_are_never_drawn():
    row = torch.full((37,), float("-inf"))
    row[[0, 9, 36]] = torch.tensor([0.0, 1.0, -0.5])  # first, middle and the ragged last chunk
    counts = _counts(row, 5_000, seed=7)
    assert counts.sum() == 5_000
    assert set(torch.nonzero(counts).view(-1).tolist()) <= {0, 9, 36}
    assert _chi2(counts[[0, 9, 36]], torch.softmax(row[[0, 9, 36]], -1)) < 13.8  # df=2, p=1e-3


@pytest.mark.parametrize(
    "shape,scale", [((3, 16, 64), 3.0), ((2, 8, 300), 10.0), ((1, 5, 7), 0.1), ((2, 4, 4096), 25.0)]
)
def test_argmax_entropy_confidence_and_samples_match_draw_exact(shape, scale):
    logits = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * scale
    u = _u(shape[:2], 0)
    fast, exact = draw_fast(logits, u), draw_exact(logits, u)
    assert torch.equal(fast.argmax, exact.argmax)
    torch.testing.assert_close(fast.entropy, exact.entropy, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(fast.confidence, exact.confidence, atol=1e-6, rtol=1e-5)
    # the same uniform picks the same token unless it falls within float rounding of a CDF boundary
    assert (fast.sampled == exact.sampled).double().mean() >= 0.97
    assert fast.sampled.dtype == torch.long and fast.sampled.shape == shape[:2]


def test_ties_and_masked_logits_follow_torch_rules():
    logits = torch.randint(0, 3, (2, 6, 50), generator=torch.Generator().manual_seed(1)).float()  # many ties
    logits[0, :, 10:40] = float("-inf")
    u = _u((2, 6), 1)
    fast, exact = draw_fast(logits, u), draw_exact(logits, u)
    assert torch.equal(fast.argmax, torch.argmax(logits, -1))  # first maximal index
    torch.testing.assert_close(fast.entropy, exact.entropy, atol=2e-5, rtol=1e-4)
    assert torch.isfinite(fast.entropy).all()
    assert not ((fast.sampled[0] >= 10) & (fast.sampled[0] < 40)).any()


def test_extreme_uniforms_never_draw_masked_tokens():
    row = torch.full((2, 2, 37), float("-inf"))
    row[..., [3, 20]] = torch.tensor([0.0, 1.0])
    u = torch.tensor([[0.0, 1.0 - 2**-53], [0.5, 1e-300]], dtype=torch.float64)
    for draw in (draw_fast, draw_exact, draw_whole):
        assert set(draw(row, u).sampled.flatten().tolist()) <= {3, 20}, draw.__name__


def test_batch_invariance_row_alone_equals_row_in_batch():
    logits = torch.randn(4, 16, 300, generator=torch.Generator().manual_seed(3)) * 4
    u = _u((4, 16), 5)
    batch = draw_fast(logits, u)
    for i in range(4):
        alone = draw_fast(logits[i : i + 1].clone(), u[i : i + 1].clone())
        for name in ("sampled", "argmax", "entropy", "confidence"):
            assert torch.equal(getattr(batch, name)[i], getattr(alone, name)[0]), (i, name)


def test_draw_whole_matches_the_blocked_draw():
    logits = torch.randn(3, 16, 1000, generator=torch.Generator().manual_seed(4)) * 5
    u = _u((3, 16), 9)
    blocked, whole = draw_fast(logits, u), draw_whole(logits, u)
    assert torch.equal(blocked.sampled, whole.sampled) and torch.equal(blocked.argmax, whole.argmax)
    torch.testing.assert_close(blocked.entropy, whole.entropy, atol=1e-6, rtol=1e-6)


def test_graph_sampling_recomputes_its_chunks_from_the_raw_logits():
    """A compiled step draws from the raw logits processed out of place (`graph_sampling`): the same draw, bit for
    bit, as the in-place processing followed by `draw_whole`, with softcap and per-row temperatures (ragged vocab)."""
    from samplers.sampler_step import graph_sampling, process_logits, processed_logits, torch_sampling

    raw = (torch.randn(3, 16, 1000, generator=torch.Generator().manual_seed(8)) * 40).to(torch.bfloat16)
    temperature, u = torch.tensor([0.7, 1.0, 1.3]), _u((3, 16), 11)
    processed = processed_logits(raw, 30.0, temperature)
    assert processed.dtype == torch.float32
    assert torch.equal(processed, process_logits(raw.float(), 30.0, temperature))
    ours = graph_sampling(raw)(processed, temperature, 30.0, u)
    ref = torch_sampling(draw_whole)(raw.float(), temperature, 30.0, u)
    for name in ("sampled", "argmax", "entropy", "confidence"):
        assert torch.equal(getattr(ours, name), getattr(ref, name)), name


def test_block_pool_path_is_exact_and_batch_invariant(monkeypatch):
    """Force many small blocks through the worker pool: same results as one inline block, per row."""
    logits = torch.randn(2, 16, 256, generator=torch.Generator().manual_seed(5)) * 3
    u = _u((2, 16), 1)
    inline = draw_fast(logits, u)
    monkeypatch.setattr(fd, "POOL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fd, "BLOCK_BYTES", 3 * 256 * 4)  # 3 rows per block: a ragged last block too
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pooled = draw_fast(logits, u)
        alone = draw_fast(logits[1:].clone(), u[1:].clone())
        assert torch.get_num_threads() == 2  # restored after the call
    finally:
        torch.set_num_threads(threads)
    for name in ("sampled", "argmax"):
        assert torch.equal(getattr(inline, name), getattr(pooled, name)), name
    torch.testing.assert_close(pooled.entropy, inline.entropy, atol=1e-6, rtol=1e-6)
    for name in ("sampled", "argmax", "entropy", "confidence"):
        assert torch.equal(getattr(pooled, name)[1], getattr(alone, name)[0]), name
