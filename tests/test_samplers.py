"""Behaviour of every acceptance rule, schedule and loop knob on tiny real models."""

from __future__ import annotations

import math

import pytest
import torch

from contract.records import GenerationRequest
from harness.engine.decode import BlockDiffusionDecoder
from samplers.config import (
    ConfidenceThresholdConfig,
    ConfidenceTopKConfig,
    EntropyBoundConfig,
    SamplerConfigError,
)
from samplers.draw import StepDraw


def _decode(adapter, cfg, prompts=("hello", "world", "12 34"), max_new_tokens=16, seed=0):
    dec = BlockDiffusionDecoder(adapter, cfg)
    reqs = [
        GenerationRequest(f"s{i}", adapter.encode(p), seed=seed + i, max_new_tokens=max_new_tokens)
        for i, p in enumerate(prompts)
    ]
    return dec.generate(reqs)


def _draw(entropy=None, confidence=None):
    t = torch.as_tensor(entropy if entropy is not None else confidence, dtype=torch.float32)
    zeros = torch.zeros_like(t, dtype=torch.long)
    return StepDraw(
        zeros,
        zeros,
        t if entropy is not None else torch.zeros_like(t),
        torch.as_tensor(confidence, dtype=torch.float32) if confidence is not None else torch.zeros_like(t),
    )


def test_entropy_bound_accepts_longest_low_entropy_prefix():
    cfg = EntropyBoundConfig(entropy_bound=0.1)
    # sorted: 0.0, 0.02, 0.05, 0.3, 1.0 -> cumsum - max: 0, 0, 0.02, 0.07, 0.37 -> first four accepted
    keep = cfg.accept(_draw(entropy=[[0.3, 0.0, 1.0, 0.05, 0.02]]), torch.tensor([0]))
    assert keep.tolist() == [[True, True, False, True, True]]
    keep = EntropyBoundConfig(entropy_bound=0.05).accept(
        _draw(entropy=[[0.3, 0.0, 1.0, 0.05, 0.02]]), torch.tensor([0])
    )
    assert keep.tolist() == [[False, True, False, True, True]]
    # the lowest-entropy token is always accepted, even above the bound
    assert EntropyBoundConfig(entropy_bound=0.1).accept(_draw(entropy=[[5.0, 6.0]]), torch.tensor([0])).tolist() == [
        [True, False]
    ]


def test_confidence_topk_schedule_grows_by_k_per_step():
    cfg = ConfidenceTopKConfig(tokens_per_step=2, max_steps=4)
    conf = [[0.1, 0.9, 0.5, 0.7, 0.2, 0.3]]
    assert cfg.accept(_draw(confidence=conf), torch.tensor([0])).sum() == 2
    assert cfg.accept(_draw(confidence=conf), torch.tensor([0])).tolist() == [[False, True, False, True, False, False]]
    assert cfg.accept(_draw(confidence=conf), torch.tensor([1])).sum() == 4
    assert cfg.accept(_draw(confidence=conf), torch.tensor([5])).sum() == 6  # capped at the canvas
    assert ConfidenceTopKConfig(max_steps=4).accept(_draw(confidence=conf), torch.tensor([0])).sum() == math.ceil(6 / 4)


def test_confidence_threshold_keeps_confident_and_at_least_one():
    cfg = ConfidenceThresholdConfig(threshold=0.8)
    assert cfg.accept(_draw(confidence=[[0.9, 0.85, 0.1]]), torch.tensor([0])).tolist() == [[True, True, False]]
    assert cfg.accept(_draw(confidence=[[0.2, 0.5, 0.1]]), torch.tensor([0])).tolist() == [[False, True, False]]


def test_remask_ratio_drops_least_confident_accepted():
    accepted = torch.tensor([[True, True, True, True, False]])
    conf = torch.tensor([[0.9, 0.2, 0.5, 0.8, 0.01]])
    assert torch.equal(EntropyBoundConfig(remask_ratio=0.0).remask(accepted, conf), accepted)
    assert EntropyBoundConfig(remask_ratio=0.5).remask(accepted, conf).tolist() == [[True, False, False, True, False]]


def test_temperature_schedules():
    lin = EntropyBoundConfig(max_steps=48)
    assert lin.temperature(48) == pytest.approx(0.8)
    assert lin.temperature(1) == pytest.approx(0.4 + 0.4 / 48)  # transformers' formula at the last step
    cos = EntropyBoundConfig(max_steps=10, temperature_schedule="cosine")
    temps = [cos.temperature(r) for r in range(10, 0, -1)]
    assert temps[0] == pytest.approx(0.8) and all(a > b for a, b in zip(temps, temps[1:])) and temps[-1] > 0.4
    const = EntropyBoundConfig(temperature_schedule="constant", t_max=0.7, t_min=0.7)
    consts = {const.temperature(r) for r in range(1, 49)}
    assert len(consts) == 1 and consts.pop() == pytest.approx(0.7)  # float32, as the logits are divided


def test_sharpened_model_stops_early_random_model_hits_cap(adapter_factory, sharp_diffusion_dir, tiny_diffusion_dir):
    sharp = _decode(adapter_factory(sharp_diffusion_dir), EntropyBoundConfig(max_steps=20))
    rand = _decode(adapter_factory(tiny_diffusion_dir), EntropyBoundConfig(max_steps=20))
    assert max(s for r in sharp for s in r.steps_per_canvas) <= 3 and all(r.step_cap_hits == 0 for r in sharp)
    assert all(s == 20 for r in rand for s in r.steps_per_canvas)
    assert all(r.step_cap_hits == len(r.steps_per_canvas) for r in rand)


def test_adaptive_stop_off_uses_every_step(adapter_factory, sharp_diffusion_dir):
    res = _decode(adapter_factory(sharp_diffusion_dir), EntropyBoundConfig(max_steps=6, adaptive_stop=False))
    assert all(s == 6 for r in res for s in r.steps_per_canvas)


def test_higher_entropy_bound_accepts_more_per_step(adapter_factory, medium_diffusion_dir):
    """The direct effect of the bound on one model (the TPF trade-off on a trained model: test_sudoku_sweep)."""
    adapter = adapter_factory(medium_diffusion_dir)
    prompts = [f"prompt {i}" for i in range(4)]
    rate = {}
    for b in (0.0001, 0.01, 50.0):
        res = _decode(adapter, EntropyBoundConfig(entropy_bound=b, max_steps=6, adaptive_stop=False), prompts=prompts)
        rate[b] = sum(a for r in res for c in r.accepted_per_step for a in c) / sum(r.nfe for r in res)
    assert rate[0.0001] < rate[0.01] < rate[50.0] == 8


def test_remask_zero_never_renoises_accepted_and_positive_does(adapter_factory, medium_diffusion_dir):
    adapter = adapter_factory(medium_diffusion_dir)
    for r in _decode(adapter, EntropyBoundConfig(max_steps=8, remask_ratio=0.0)):
        for acc, ren in zip(r.accepted_per_step, r.renoised_per_step):
            assert all(a + n == 8 for a, n in zip(acc, ren))
    base = _decode(adapter, EntropyBoundConfig(max_steps=8, entropy_bound=5.0))
    remasked = _decode(adapter, EntropyBoundConfig(max_steps=8, entropy_bound=5.0, remask_ratio=0.5))
    acc_base = sum(sum(sum(c) for c in r.accepted_per_step) / r.nfe for r in base)
    acc_rm = sum(sum(sum(c) for c in r.accepted_per_step) / r.nfe for r in remasked)
    assert acc_rm < acc_base


@pytest.mark.parametrize(
    "cfg", [ConfidenceTopKConfig(max_steps=8), ConfidenceThresholdConfig(max_steps=8, threshold=0.5)]
)
def test_confidence_samplers_decode(adapter_factory, medium_diffusion_dir, cfg):
    res = _decode(adapter_factory(medium_diffusion_dir), cfg)
    assert all(r.num_tokens > 0 and 0 < r.nfe <= 8 * len(r.steps_per_canvas) for r in res)
    if isinstance(cfg, ConfidenceTopKConfig):  # 1 new token per step on a canvas of 8
        long = [acc for r in res for acc in r.accepted_per_step if len(acc) >= 3]
        assert long and all(acc[:3] == [1, 2, 3] for acc in long)


def test_self_conditioning_switch_changes_the_computation(adapter_factory, medium_diffusion_dir):
    adapter = adapter_factory(medium_diffusion_dir)
    on = _decode(adapter, EntropyBoundConfig(max_steps=6, self_conditioning=True, capture_trajectory=True))
    off = _decode(adapter, EntropyBoundConfig(max_steps=6, self_conditioning=False, capture_trajectory=True))
    first = [[t["mean_entropy"] for t in r.trajectory[:1]] for r in on]
    assert first == [[t["mean_entropy"] for t in r.trajectory[:1]] for r in off]  # step 1 has no signal yet
    later = [[t["mean_entropy"] for t in r.trajectory[1:]] for r in on]
    assert all(a != b for a, b in zip(later, [[t["mean_entropy"] for t in r.trajectory[1:]] for r in off]))


def test_canvas_length_override(adapter_factory, tiny_diffusion_dir):
    res = _decode(
        adapter_factory(tiny_diffusion_dir), EntropyBoundConfig(max_steps=3, canvas_length=4), max_new_tokens=12
    )
    for r in res:
        assert len(r.steps_per_canvas) == 3 or r.finished_by == "eos"
        assert all(a + n == 4 for c_a, c_n in zip(r.accepted_per_step, r.renoised_per_step) for a, n in zip(c_a, c_n))


def test_trajectory_capture(adapter_factory, medium_diffusion_dir):
    """One record per denoiser forward, steps counted per canvas, and each canvas's last argmax is what it committed."""
    res = _decode(adapter_factory(medium_diffusion_dir), EntropyBoundConfig(max_steps=5, capture_trajectory=True))
    for r in res:
        assert len(r.trajectory) == r.nfe
        per_canvas = [[t for t in r.trajectory if t["canvas"] == k] for k in range(len(r.steps_per_canvas))]
        assert [len(p) for p in per_canvas] == r.steps_per_canvas
        assert all([t["step"] for t in p] == list(range(len(p))) for p in per_canvas)
        committed = [tok for p in per_canvas for tok in p[-1]["argmax"]]
        assert r.token_ids == [t for t in committed[: len(r.token_ids)] if t != 0]
        assert all(len(t["argmax"]) == 8 and t["mean_entropy"] >= 0 for t in r.trajectory)


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"entropy_bound": 0.0}, "entropy_bound"),
        ({"entropy_bound": -1.0}, "entropy_bound"),
        ({"t_max": 0.3, "t_min": 0.5}, "t_max"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"temperature_schedule": "exp"}, "temperature_schedule"),
        ({"remask_ratio": 1.0}, "remask_ratio"),
        ({"random_stream": "global"}, "random_stream"),
        ({"entropy_bound": "high"}, "entropy_bound"),
        ({"t_max": float("inf")}, "t_max"),
        ({"max_steps": 2, "stability_steps": 3}, "stability_steps"),
    ],
)
def test_bad_sampler_values_name_the_key(kwargs, key):
    with pytest.raises(SamplerConfigError, match=f"sampler.{key}"):
        EntropyBoundConfig(**kwargs)
