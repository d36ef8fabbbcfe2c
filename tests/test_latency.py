"""Latency as a user sees it: per-sample time to first token and end-to-end latency, checked against timestamps
this test records itself around the real engines' forwards, and their per-run percentiles."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from contract.records import GenerationRequest, decode_metrics, percentile
from harness.engine.decoders import decoder_for

REPO = Path(__file__).resolve().parents[1]


def test_percentile_is_numpys_linear_rule():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = list(rng.exponential(size=n))
        for q in (0, 1, 5, 50, 95, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None


class Clock:
    """Times of the events this test can see from outside the engine: requests pulled from the queue, results
    yielded, and the start / end of model calls (recorded by wrappers that call the real methods)."""

    def __init__(self):
        self.events: list[tuple[str, float, float]] = []  # (what, start, end)

    def wrap(self, what: str, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self.events.append((what(*args) if callable(what) else what, t0, time.perf_counter()))
            return out

        return timed

    def queue(self, requests):
        for r in requests:
            self.events.append((f"pull:{r.sample_id}", time.perf_counter(), time.perf_counter()))
            yield r

    def between(self, start: str, end: str) -> list[tuple[str, float, float]]:
        i = next(k for k, e in enumerate(self.events) if e[0] == start)
        j = next(k for k, e in enumerate(self.events) if e[0] == end)
        return self.events[i : j + 1]


def requests(n: int, max_new: int, tok) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"s{i}", tok(f"prompt {i}", add_special_tokens=False)["input_ids"], i, max_new)
        for i in range(n)
    ]


def decode_one_at_a_time(dec, clock: Clock, reqs) -> list[tuple[object, float]]:
    out = []
    for res in dec.stream(clock.queue(reqs), batch_size=1):
        clock.events.append((f"done:{res.sample_id}", time.perf_counter(), time.perf_counter()))
        out.append(res)
    return out


def check_percentiles(results, lower: dict[str, float], upper: dict[str, float]) -> dict:
    rows = [r.to_dict() for r in results]
    m = decode_metrics(rows)
    ttft = [r.ttft_s for r in results]
    lat = [r.latency_s for r in results]
    for q in (50, 95, 99):
        assert m[f"ttft_p{q}_s"] == pytest.approx(float(np.percentile(ttft, q)))
        assert m[f"latency_p{q}_s"] == pytest.approx(float(np.percentile(lat, q)))
        # every sample lies within its recorded bounds, so every percentile lies within theirs
        lo = float(np.percentile([lower[r.sample_id] for r in results], q))
        hi = float(np.percentile([upper[r.sample_id] for r in results], q))
        assert lo <= m[f"ttft_p{q}_s"] <= hi
    rates = [r.num_tokens / r.latency_s for r in results]
    assert m["user_tokens_per_second_p5"] == pytest.approx(float(np.percentile(rates, 5)))
    return m


def test_diffusion_ttft_is_the_first_committed_canvas():
    """Batch 1, two steps per canvas (adaptive stop off): the first canvas is final after the second denoise
    following the sample's prefill, and before the commit that re-encodes it (or the result, for a sample that
    ended in its first canvas)."""
    from harness.engine.decode import BlockDiffusionDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig

    adapter = DiffusionGemmaAdapter(str(REPO / "outputs/tiny/diffusion"), dtype="float32")
    clock = Clock()
    for name in ("prefill", "denoise", "commit"):
        setattr(adapter, name, clock.wrap(name, getattr(adapter, name)))
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(max_steps=2, adaptive_stop=False))
    results = decode_one_at_a_time(dec, clock, requests(4, 3 * dec.canvas_length, adapter.tokenizer))
    lower, upper = {}, {}
    for res in results:
        span = clock.between(f"pull:{res.sample_id}", f"done:{res.sample_id}")
        k = len(res.steps_per_canvas)
        assert [e[0] for e in span[1:-1]] == ["prefill"] + ["denoise", "denoise", "commit"] * (k - 1) + ["denoise"] * 2
        pulled, done = span[0][1], span[-1][1]
        prefill, second_denoise, after = span[1], span[3], span[4]  # after: the first commit, or the result
        lower[res.sample_id] = second_denoise[2] - prefill[1]  # admitted before the prefill started
        upper[res.sample_id] = after[1] - pulled
        assert lower[res.sample_id] <= res.ttft_s <= upper[res.sample_id]
        assert span[-2][2] - prefill[1] <= res.latency_s <= done - pulled  # end to end: admitted -> finished
        assert res.ttft_s <= res.latency_s and (k == 1 or res.ttft_s < span[-2][1] - pulled)
    assert max(len(r.steps_per_canvas) for r in results) >= 2  # some first canvas is followed by others
    check_percentiles(results, lower, upper)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny_ar", "tiny_ar_draft"])
def test_ar_ttft_is_the_first_accepted_token(model):
    """Batch 1: plain AR takes the first token from the prompt's prefill forward (as `generate()`), so it is
    accepted after that forward and before the first step; with a draft, the first step forward verifies it
    with the first drafts, so it is accepted after that step and before the second."""
    from hydra.utils import instantiate

    from tests.helpers.app import compose_app

    dec = decoder_for(instantiate(compose_app(f"model={model}").model), None)
    clock = Clock()
    target = dec.engine.target
    # prefill forwards write given rows; step forwards run rows 0..b-1 (rows=None)
    target.forward = clock.wrap(lambda cache, rows, *a: "prefill" if rows is not None else "step", target.forward)
    results = decode_one_at_a_time(dec, clock, requests(3, 12, dec.tokenizer))
    lower, upper = {}, {}
    for res in results:
        span = clock.between(f"pull:{res.sample_id}", f"done:{res.sample_id}")
        forwards = [e for e in span if e[0] in ("prefill", "step")]
        steps = [e for e in forwards if e[0] == "step"]
        assert len(steps) >= 2 and forwards[0][0] == "prefill"
        first, after = (forwards[0], steps[0]) if dec.engine.drafter is None else (steps[0], steps[1])
        lower[res.sample_id] = first[2] - forwards[0][1]
        upper[res.sample_id] = after[1] - span[0][1]
        assert lower[res.sample_id] <= res.ttft_s <= upper[res.sample_id]
        assert steps[-1][2] - forwards[0][1] <= res.latency_s <= span[-1][1] - span[0][1]
    m = check_percentiles(results, lower, upper)
    assert m["ttft_p50_s"] < m["latency_p50_s"]


def test_lockstep_ttft_is_the_batch_first_canvas():
    """`random_stream=reference` decodes whole batches: every row's first canvas is final at the same moment,
    before the first commit of the batch."""
    from harness.engine.decode import BlockDiffusionDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig

    adapter = DiffusionGemmaAdapter(str(REPO / "outputs/tiny/diffusion"), dtype="float32", eos_token_ids=[3])
    clock = Clock()
    adapter.commit = clock.wrap("commit", adapter.commit)
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(max_steps=2, random_stream="reference"))
    t0 = time.perf_counter()
    results = list(dec.stream(requests(2, 2 * dec.canvas_length, adapter.tokenizer), batch_size=2))
    first_commit = next(e for e in clock.events if e[0] == "commit")
    for res in results:
        assert 0 < res.ttft_s <= first_commit[1] - t0 and res.ttft_s < res.latency_s
    # the same moment for both rows, less their admission times (taken one after the other: a busy machine can
    # put a context switch between them)
    assert results[0].ttft_s == pytest.approx(results[1].ttft_s, abs=0.05)
