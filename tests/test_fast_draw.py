"""`draw_fast` keeps `draw_exact`'s contract: softmax sampling, same argmax/entropy/confidence, per-row streams."""

from __future__ import annotations

import pytest
import torch

import samplers.fast_draw as fd
from samplers.draw import draw_exact
from samplers.fast_draw import draw_fast

# chi-square critical value at p = 1e-4 for df = 9 (10 categories): a correct sampler fails 1 seed in 10,000
CHI2_CRIT_DF9 = 33.72


def _gens(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    n = counts.sum()
    expected = probs.double() * n
    return float(((counts.double() - expected) ** 2 / expected).sum())


def _counts(logits_row: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Draw n samples from one categorical by putting it at n canvas positions of one row."""
    v = logits_row.numel()
    logits = logits_row.expand(1, n, v).contiguous()
    draw = draw_fast(logits, _gens([seed]))
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


@pytest.mark.parametrize("shape,scale", [((3, 16, 64), 3.0), ((2, 8, 300), 10.0), ((1, 5, 7), 0.1), ((2, 4, 4096), 25.0)])
def test_argmax_entropy_confidence_match_draw_exact(shape, scale):
    logits = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * scale
    fast = draw_fast(logits, _gens(range(shape[0])))
    exact = draw_exact(logits, _gens(range(shape[0])))
    assert torch.equal(fast.argmax, exact.argmax)
    torch.testing.assert_close(fast.entropy, exact.entropy, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(fast.confidence, exact.confidence, atol=1e-6, rtol=1e-5)
    assert fast.sampled.dtype == torch.long and fast.sampled.shape == shape[:2]
    assert int(fast.sampled.min()) >= 0 and int(fast.sampled.max()) < shape[2]


def test_ties_and_masked_logits_follow_torch_rules():
    logits = torch.randint(0, 3, (2, 6, 50), generator=torch.Generator().manual_seed(1)).float()  # many ties
    logits[0, :, 10:40] = float("-inf")
    fast = draw_fast(logits, _gens([0, 1]))
    exact = draw_exact(logits, _gens([0, 1]))
    assert torch.equal(fast.argmax, torch.argmax(logits, -1))  # first maximal index
    torch.testing.assert_close(fast.entropy, exact.entropy, atol=2e-5, rtol=1e-4)
    assert torch.isfinite(fast.entropy).all()
    assert not ((fast.sampled[0] >= 10) & (fast.sampled[0] < 40)).any()


def test_inactive_rows_draw_nothing_and_return_argmax():
    logits = torch.randn(3, 16, 64, generator=torch.Generator().manual_seed(2))
    gens = _gens([10, 11, 12])
    before = [g.get_state() for g in gens]
    active = torch.tensor([True, False, True])
    draw = draw_fast(logits, gens, active)
    assert torch.equal(gens[1].get_state(), before[1])
    assert not torch.equal(gens[0].get_state(), before[0]) and not torch.equal(gens[2].get_state(), before[2])
    assert torch.equal(draw.sampled[1], draw.argmax[1])


def test_batch_invariance_row_alone_equals_row_in_batch():
    logits = torch.randn(4, 16, 300, generator=torch.Generator().manual_seed(3)) * 4
    seeds = [5, 6, 7, 8]
    batch = draw_fast(logits, _gens(seeds), torch.tensor([True, True, False, True]))
    for i in [0, 1, 3]:
        alone = draw_fast(logits[i : i + 1].clone(), _gens([seeds[i]]))
        for name in ("sampled", "argmax", "entropy", "confidence"):
            assert torch.equal(getattr(batch, name)[i], getattr(alone, name)[0]), (i, name)


def test_same_seed_same_draws_and_streams_advance():
    logits = torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(4))
    g = _gens([9])
    first, second = draw_fast(logits, g).sampled, draw_fast(logits, g).sampled
    assert torch.equal(first, draw_fast(logits, _gens([9])).sampled)
    assert not torch.equal(first, second)  # the stream moved on (16 positions over 64 tokens)


def test_block_pool_path_is_exact_and_batch_invariant(monkeypatch):
    """Force many small blocks through the worker pool: same results as one inline block, per row."""
    logits = torch.randn(2, 16, 256, generator=torch.Generator().manual_seed(5)) * 3
    inline = draw_fast(logits, _gens([1, 2]))
    monkeypatch.setattr(fd, "POOL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fd, "BLOCK_BYTES", 3 * 256 * 4)  # 3 rows per block: a ragged last block too
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pooled = draw_fast(logits, _gens([1, 2]))
        alone = draw_fast(logits[1:].clone(), _gens([2]))
        assert torch.get_num_threads() == 2  # restored after the call
    finally:
        torch.set_num_threads(threads)
    for name in ("sampled", "argmax"):
        assert torch.equal(getattr(inline, name), getattr(pooled, name)), name
    torch.testing.assert_close(pooled.entropy, inline.entropy, atol=1e-6, rtol=1e-6)
    for name in ("sampled", "argmax", "entropy", "confidence"):
        assert torch.equal(getattr(pooled, name)[1], getattr(alone, name)[0]), name
