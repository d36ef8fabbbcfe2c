"""WINO, SlowFast and KLASS as rules (samplers/strategies/): each `step` against a reference written here from the
authors' code (plain per-row loops over torch.topk / argmax, none of our helpers), on random logits at batch 1-3;
their configs validate naming the key; Hydra composes each sampler yaml and sweeps its knobs."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from harness.strategies_check.rule_loop import step_input
from samplers.config import SamplerConfigError
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn
from samplers.strategies.klass import KlassConfig
from samplers.strategies.slowfast import SlowFastConfig
from samplers.strategies.wino import WinoConfig
from tests.helpers.app import compose_app

MASK = 0  # the mask id of the random cases (token 0 is never drawn: its logit is pushed down)


def _logits(gen: torch.Generator, b: int, width: int, vocab: int, scale: float) -> torch.Tensor:
    x = torch.randn(b, width, vocab, generator=gen, dtype=torch.float64) * scale
    x[..., MASK] = -1e9
    return x


def _block(gen: torch.Generator, b: int, width: int, vocab: int, p_mask: float) -> torch.Tensor:
    tok = torch.randint(1, vocab, (b, width), generator=gen)
    masked = torch.rand(b, width, generator=gen) < p_mask
    masked[:, 0] |= ~masked.any(-1)  # a row to step has a mask
    return tok.masked_fill(masked, MASK)


def _step_in(logits, block, carry, step=None, share=None) -> MaskedStepIn:
    b = block.shape[0]
    step = [0] * b if step is None else step.tolist()
    plans = [BlockPlan(99, [1 if share is None else int(s)]) for s in (share if share is not None else [1] * b)]
    editable = torch.ones_like(block, dtype=torch.bool)
    return step_input(
        logits, block, editable, plans, step, [False] * b, torch.zeros(3, b, dtype=torch.long), MASK, carry
    )


# ------------------------------------------------------------------------------------------------------------------
# WINO: decoding_wino's selection for one row, written from the authors' loop


def wino_reference(logits, shadow, block, last_accept, thr, thr_back):
    """(next block, transferred, remasked, accepted) for one row, as decoding_wino's loop body does it."""
    masked = block == MASK
    x0 = logits.argmax(-1)
    p = torch.softmax(logits.double(), -1)
    conf = torch.where(masked, p.gather(-1, x0[:, None])[:, 0], -np.inf)
    back = torch.softmax(shadow.double(), -1).gather(-1, block[:, None])[:, 0]
    back = torch.where(~masked, back, np.inf)
    max_accept = min(max(int(masked.sum() * 0.7), 5), 20)
    transfer = conf > thr
    if transfer.sum() > max_accept:
        _, idx = torch.topk(conf, k=max_accept, largest=True)
        transfer = torch.zeros_like(transfer)
        transfer[idx] = True
    elif not transfer.any():
        transfer[torch.argmax(conf)] = True
    out = torch.where(transfer, x0, block)
    n = int(transfer.sum())
    remask = torch.zeros_like(transfer)
    if n > 1:
        remask = back < thr_back
        if remask.sum() >= last_accept:
            remask = torch.zeros_like(transfer)
            _, idx = torch.topk(back, k=last_accept - 1, largest=False)
            remask[idx] = True
    return out.masked_fill(remask, MASK), transfer, remask, n


@pytest.mark.parametrize("seed", range(40))
def test_wino_step_equals_the_authors_rule(seed):
    gen = torch.Generator().manual_seed(seed)
    b, width, vocab = 1 + seed % 3, [4, 8, 16, 32][seed % 4], 12
    rule = WinoConfig(threshold=[0.6, 0.3, 0.8][seed % 3], threshold_back=[0.9, 0.7][seed % 2])
    logits = _logits(gen, b, 2 * width, vocab, 2.5)
    block = _block(gen, b, width, vocab, [0.3, 0.6, 0.9][seed % 3])
    last = torch.randint(1, 12, (b,), generator=gen)
    carry = [None if seed % 4 == 0 else {"last_accept": a} for a in last]
    out = rule.step(_step_in(logits, block, carry))
    for i in range(b):
        want_last = 30 if carry[i] is None else int(last[i])
        want = wino_reference(logits[i, :width], logits[i, width:], block[i], want_last, *_thr(rule))
        assert torch.equal(out.block[i], want[0]) and torch.equal(out.filled[i], want[1])
        assert torch.equal(out.remasked[i], want[2]) and int(out.carry[i]["last_accept"]) == want[3]


def _thr(rule):
    return rule.threshold, rule.threshold_back


def test_wino_cases_exercise_narrow_out():
    """The random cases above re-mask (a reference never reached would pass vacuously)."""
    hits = 0
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        b, width = 1 + seed % 3, [4, 8, 16, 32][seed % 4]
        logits, block = _logits(gen, b, 2 * width, 12, 2.5), _block(gen, b, width, 12, [0.3, 0.6, 0.9][seed % 3])
        hits += int(WinoConfig(threshold=0.3).step(_step_in(logits, block, [])).remasked.sum())
    assert hits > 0


def test_wino_shadow_needs_the_shadow_logits():
    gen = torch.Generator().manual_seed(0)
    x = _step_in(_logits(gen, 1, 4, 8, 1.0), _block(gen, 1, 4, 8, 0.5), [])
    with pytest.raises(ValueError, match="verify=shadow"):
        WinoConfig().step(x)
    assert WinoConfig(verify="self").step(x).block.shape == (1, 4)


# ------------------------------------------------------------------------------------------------------------------
# KLASS: stable_confident_decode's selection for one row (alg="klass", unmask_strategy)


def klass_reference(logits, p_prev, hist, step, share, block, cfg):
    """(next block, transferred, p, new history) for one row, as stable_confident_decode's loop body does it."""
    masked = block == MASK
    p = torch.softmax(logits.double(), -1)
    x0 = p.argmax(-1)
    conf = p.gather(-1, x0[:, None])[:, 0]
    kl = (p * (torch.log(p + 1e-12) - torch.log(p_prev + 1e-12))).sum(-1)
    hist = torch.roll(hist, shifts=-1, dims=-1)
    hist[..., -1] = kl
    stable = torch.all(hist < cfg.kl_threshold, -1) if step >= cfg.kl_history - 1 else torch.zeros_like(masked)
    ready = torch.where(stable & (conf > cfg.threshold) & masked)[0]
    transfer = torch.zeros_like(masked)
    if len(ready) > 0:
        if len(ready) > 1 and cfg.unmask == "max_conf":
            ready = ready[torch.argmax(conf[ready])][None]
        elif len(ready) > 1 and cfg.unmask == "min_kl":
            ready = ready[torch.argmin(kl[ready])][None]
        transfer[ready] = True
    else:
        _, idx = torch.topk(torch.where(masked, conf, -np.inf), k=min(share, int(masked.sum())))
        transfer[idx] = True
    return torch.where(transfer, x0, block), transfer, p, hist


@pytest.mark.parametrize("seed", range(40))
def test_klass_step_equals_the_authors_rule(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    b, width, vocab = 1 + seed % 3, [4, 8, 16][seed % 3], 10
    cfg = KlassConfig(
        threshold=[0.9, 0.6][seed % 2], kl_threshold=[0.01, 0.2, 1.0][seed % 3], kl_history=1 + seed % 3,
        unmask=["all", "max_conf", "min_kl"][seed % 3],
    )  # fmt: skip
    step = torch.randint(0, 4, (b,), generator=gen)
    share = torch.randint(1, 3, (b,), generator=gen)
    base = _logits(gen, b, width, vocab, 3.0)
    prev = torch.softmax(base + 0.05 * torch.randn(base.shape, generator=gen, dtype=base.dtype), -1)
    hist = torch.rand(b, width, cfg.kl_history, generator=gen, dtype=torch.float64) * [0.02, 0.5][seed % 2]
    first = seed % 5 == 0
    carry = [None if first else {"probs": prev[i], "kl": hist[i]} for i in range(b)]
    block = _block(gen, b, width, vocab, 0.6)
    out = cfg.step(_step_in(base, block, carry, step, share))
    for i in range(b):
        p0, h0 = (torch.zeros_like(prev[i]), torch.zeros_like(hist[i])) if first else (prev[i], hist[i].clone())
        want = klass_reference(base[i], p0, h0, int(step[i]), int(share[i]), block[i], cfg)
        assert torch.equal(out.block[i], want[0]) and torch.equal(out.filled[i], want[1])
        assert torch.equal(out.carry[i]["kl"], want[3])


# ------------------------------------------------------------------------------------------------------------------
# SlowFast: generate_slow_fast_sampling's block loop for one row over a logits oracle


def _oracle(vocab: int, scale: float):
    """Logits as a function of the block's content and the canvas cut (so two loops see the same logits exactly
    when they are in the same state)."""

    def logits(block: list[int], cut: int) -> torch.Tensor:
        seed = int(hashlib.sha1(repr((block, cut)).encode()).hexdigest()[:12], 16)
        g = torch.Generator().manual_seed(seed)
        return _logits(g, 1, len(block), vocab, scale)[0]

    return logits


def slowfast_reference(oracle, width, cfg) -> tuple[list[int], int]:
    """One block of masks decoded as the authors' sub-cycle loop does it (batch 1): (block, forwards)."""
    x, calls, last, span = [MASK] * width, 0, 0, width

    def look(cut=-1):
        lg = oracle(x, cut)
        p = torch.softmax(lg, -1)
        x0 = lg.argmax(-1)
        return x0, torch.where(torch.tensor(x) == MASK, p.gather(-1, x0[:, None])[:, 0], -np.inf)

    def fill(x0, conf, lo, hi):
        masked = torch.tensor(x[lo:hi]) == MASK
        if not masked.any():
            return
        high = (conf[lo:hi] >= cfg.threshold) & masked
        idx = high.nonzero()[:, 0] if high.sum() > 1 else torch.topk(torch.where(masked, conf[lo:hi], -np.inf), 1)[1]
        for j in idx.tolist():
            x[lo + j] = int(x0[lo + j])

    cycles = 0
    while MASK in x and cycles < cfg.max_cycles:
        cycles += 1
        settled, hist = False, []
        for k in range(cfg.explore_steps):
            x0, conf = look()
            calls += 1
            if not settled:
                scope = conf[last:]
                above = (scope >= cfg.span_threshold).nonzero()[:, 0]
                inc = (int(above.max()) + 1 if len(above) else 1) if last < width else 0
                hist = (hist + [min(max(1, last + inc), width)])[-cfg.stability_window :]
                if len(hist) >= cfg.stability_window:
                    if np.std(np.array(hist)) < cfg.stability_std:
                        span, settled = max(1, min(hist[-1], width)), True
                    else:
                        span = max(1, min(int(np.mean(np.array(hist))), width))
                        settled = k == cfg.explore_steps - 1
            fill(x0, conf, last, width)
        if not settled:
            span = max(1, min(int(np.mean(hist)), width)) if hist else width // 2
        fast = 0
        while last < span and MASK in x[last:span]:
            x0, conf = look(-1 if fast == 0 else span)
            calls, fast = calls + 1, fast + 1
            fill(x0, conf, last, span)
        last = span
    return x, calls


def slowfast_ours(oracle, width, cfg, batch: int) -> tuple[list[list[int]], list[int]]:
    """The rule over `batch` copies of the block, rows dropping out as their block ends (each its own carry)."""
    rows = [{"x": [MASK] * width, "carry": None, "step": 0, "post": 0, "calls": 0, "done": False} for _ in range(batch)]
    while busy := [r for r in rows if not r["done"]]:
        cuts = [int(r["carry"]["canvas_end"]) if r["carry"] else -1 for r in busy]
        logits = torch.stack([oracle(r["x"], c) for r, c in zip(busy, cuts, strict=True)])
        block = torch.tensor([r["x"] for r in busy])
        out = cfg.step(_step_in(logits, block, [r["carry"] for r in busy]))
        for i, r in enumerate(busy):
            had = MASK in r["x"]
            r["x"], r["carry"], r["calls"] = out.block[i].tolist(), out.carry[i], r["calls"] + 1
            r["step"], r["post"] = r["step"] + had, r["post"] + (not had)
            progress = BlockProgress(had, MASK in r["x"], False, r["step"], 4096, r["post"], r["carry"])
            r["done"] = cfg.block_end(progress)[0]
    return [r["x"] for r in rows], [r["calls"] for r in rows]


@pytest.mark.parametrize("seed", range(24))
def test_slowfast_block_equals_the_authors_loop(seed):
    width = [4, 8, 16, 32][seed % 4]
    cfg = SlowFastConfig(
        explore_steps=[6, 2, 3][seed % 3], threshold=[0.9, 0.6][seed % 2], span_threshold=[0.3, 0.5][seed % 2],
        stability_window=[2, 3, 8][seed % 3], max_cycles=[256, 2][(seed // 3) % 2],
    )  # fmt: skip
    oracle = _oracle(9, [2.0, 4.0][seed % 2] + seed * 1e-3)
    want = slowfast_reference(oracle, width, cfg)
    got = slowfast_ours(oracle, width, cfg, 1 + seed % 3)
    assert all(x == want[0] for x in got[0]) and all(c == want[1] for c in got[1])


# ------------------------------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize(
    "cls,kw,key",
    [
        (WinoConfig, {"threshold": None}, "threshold"),
        (WinoConfig, {"threshold_back": 1.5}, "threshold_back"),
        (WinoConfig, {"accept_ratio": 0}, "accept_ratio"),
        (WinoConfig, {"accept_min": 30}, "accept_min"),
        (WinoConfig, {"first_last_accept": 0}, "first_last_accept"),
        (WinoConfig, {"verify": "both"}, "verify"),
        (WinoConfig, {"remask_ratio": 0.2}, "remask_ratio"),
        (KlassConfig, {"kl_threshold": 0}, "kl_threshold"),
        (KlassConfig, {"kl_history": 0}, "kl_history"),
        (KlassConfig, {"unmask": "random"}, "unmask"),
        (KlassConfig, {"threshold": None}, "threshold"),
        (SlowFastConfig, {"explore_steps": 0}, "explore_steps"),
        (SlowFastConfig, {"span_threshold": -0.1}, "span_threshold"),
        (SlowFastConfig, {"stability_std": 0}, "stability_std"),
        (SlowFastConfig, {"stability_window": 1.5}, "stability_window"),
        (SlowFastConfig, {"max_cycles": True}, "max_cycles"),
        (SlowFastConfig, {"editing_threshold": 0.5}, "editing_threshold"),
    ],
)
def test_bad_knobs_fail_naming_the_key(cls, kw, key):
    with pytest.raises(SamplerConfigError, match=rf"sampler\.{key}:"):
        cls(**kw)


@pytest.mark.parametrize(
    "name,cls,knob,value",
    [("wino", WinoConfig, "threshold_back", 0.8), ("slowfast", SlowFastConfig, "explore_steps", 3),
     ("klass", KlassConfig, "kl_threshold", 0.015)],
)  # fmt: skip
def test_hydra_composes_each_strategy_and_its_knobs(name, cls, knob, value):
    cfg = compose_app("model=tiny_masked", f"sampler={name}", f"sampler.{knob}={value}")
    sampler = instantiate(cfg.sampler)
    assert type(sampler) is cls and sampler.name == name and getattr(sampler, knob) == value
    defaults = cls()
    for f in ("threshold", "steps_per_block", "cap_at_block"):  # the yaml's values are the class's
        assert getattr(instantiate(compose_app("model=tiny_masked", f"sampler={name}").sampler), f) == getattr(
            defaults, f
        )
    with pytest.raises(Exception, match=rf"sampler\.{knob}"):
        instantiate(compose_app("model=tiny_masked", f"sampler={name}", f"sampler.{knob}=-1").sampler)


def test_blocks_end_when_their_rule_says():
    """WINO and KLASS: no mask left or the cap; SlowFast: its carry (a filled block still runs its slow phase)."""
    filled = BlockProgress(True, False, False, 3, 10, 0)
    assert WinoConfig().block_end(filled) == (True, False)
    assert KlassConfig().block_end(BlockProgress(True, True, False, 10, 10, 0)) == (True, True)
    cfg = SlowFastConfig()
    gen = torch.Generator().manual_seed(0)
    x = _step_in(_logits(gen, 1, 4, 8, 0.1), torch.full((1, 4), MASK), [])
    out = cfg.step(x)
    assert not cfg.block_end(BlockProgress(True, True, False, 1, 4096, 0, out.carry[0]))[0]
    assert math.isfinite(float(out.carry[0]["canvas_end"]))


@pytest.mark.parametrize("cls", [WinoConfig, SlowFastConfig, KlassConfig])
def test_an_ar_seeded_layout_is_refused(cls):
    assert cls().plan(8, 16, 8).steps > 0
    with pytest.raises(SamplerConfigError, match=r"sampler\.name: .* does not seed"):
        cls().plan(8, 16, 8, seeded=True)
