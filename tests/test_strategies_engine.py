"""The strategies through our engine (`harness.engine.masked`) decode as through the rule loop the authors' code is
checked against (`harness.strategies_check.rule_loop`, LLaDA's layout): every forward's input canvas and the
answer. What the engine gives the rules for it: SlowFast's block end read from its carry (`BlockProgress.carry`)
and its fast phase's canvas cut (`canvas_end`); KLASS's carry kept across blocks with the logits after the block
(`MaskedStepIn.ahead`, the whole-answer canvas); WINO's shadow block (its L verify queries in the forward). Runs
without the authors' code."""

from __future__ import annotations

import pytest
import torch

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from harness.strategies_check import llada, rule_loop
from models.masked_diffusion import MaskedDiffusionAdapter
from samplers.strategies.klass import KlassConfig
from samplers.strategies.slowfast import SlowFastConfig
from samplers.strategies.wino import WinoConfig

VOCAB, MASK, EOS = 128, 126, 100


@pytest.fixture(scope="module")
def tiny():
    return llada.tiny_llada(VOCAB, MASK, EOS, seed=0, sharpen=65.0)


def _adapter(tiny, tmp_path, width, context="recompute"):
    path = llada.save_tiny_llada(tmp_path / f"w{width}", tiny, width)
    canvas = "answer" if context == "recompute" else "block"
    return MaskedDiffusionAdapter(
        str(path), dtype="float64", attention="bidirectional", context=context, eos_token_ids=[EOS],
        num_threads=1, canvas=canvas, block_origin="prompt", block_length=width,
    )  # fmt: skip


def _engine(tiny, tmp_path, rule, prompts, gen, width):
    """Each prompt alone through the engine: its forwards' input ids and its answer."""
    ad = _adapter(tiny, tmp_path, width)
    dec = MaskedDiffusionDecoder(ad, rule)
    seen: list[list[int]] = []
    hook = ad.model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["input_ids"][0].tolist()),
                                              with_kwargs=True)  # fmt: skip
    out = []
    try:
        for p in prompts:
            seen.clear()
            res = dec.generate([GenerationRequest("c", p, seed=0, max_new_tokens=gen)])[0]
            out.append((list(seen), res.token_ids, res.nfe))
    finally:
        hook.remove()
    return out


def _loop(tiny, rule, prompts, gen, width, shadow=False):
    rows = [rule_loop.decode(rule, tiny.model, [p], gen, width, MASK, shadow)[0] for p in prompts]
    return [(r.trace, r.x[r.prompt :], r.total, r.remasked or r.cut) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize(
    "knobs", [dict(explore_steps=3, threshold=0.7, stability_std=0.5, max_cycles=2), dict(explore_steps=6)]
)
def test_slowfast_through_the_engine_equals_the_rule_loop(tiny, tmp_path, knobs):
    rule = SlowFastConfig(eos_early_stop=False, **knobs)
    prompts, gen, width = [[5, 6, 7], [9, 10, 11, 12, 13]], 16, 8
    with torch.no_grad():
        ours, loop = _engine(tiny, tmp_path, rule, prompts, gen, width), _loop(tiny, rule, prompts, gen, width)
    assert sum(c for *_, c in loop) > 0  # the fast phase's cut canvas ran
    for (trace, answer, nfe), (want, x, total, _) in zip(ours, loop, strict=True):
        assert trace == want and nfe == total
        assert answer == (x[: x.index(EOS) + 1] if EOS in x else x)


class _PerBlock(KlassConfig):
    """KLASS with its history reset at each block (as before the engine kept the carry across blocks)."""

    carry_across_blocks = False


@pytest.mark.slow
def test_klass_keeps_its_history_across_blocks_through_the_engine(tiny, tmp_path):
    rule = KlassConfig(threshold=0.6, kl_threshold=0.2, kl_history=1, steps_per_block=4, eos_early_stop=False)
    prompts, gen, width = [[5, 6, 7], [20, 21, 22, 23]], 12, 4
    with torch.no_grad():
        ours, loop = _engine(tiny, tmp_path, rule, prompts, gen, width), _loop(tiny, rule, prompts, gen, width)
        reset = [rule_loop.decode(_PerBlock(**rule.knobs()), tiny.model, [p], gen, width, MASK)[0] for p in prompts]
    for (trace, answer, nfe), (want, x, total, _) in zip(ours, loop, strict=True):
        assert trace == want and nfe == total
        assert answer == (x[: x.index(EOS) + 1] if EOS in x else x)
    assert [r.trace for r in reset] != [t for t, *_ in loop]  # the history across blocks changes the decode here


@pytest.mark.slow
def test_wino_shadow_block_through_the_engine(tiny, tmp_path):
    rule = WinoConfig(threshold=0.6, threshold_back=0.9, eos_early_stop=False)
    prompts, gen, width = [[5, 6, 7], [9, 10, 11, 12, 13], [30, 31]], 16, 8
    with torch.no_grad():
        ours, loop = _engine(tiny, tmp_path, rule, prompts, gen, width), _loop(tiny, rule, prompts, gen, width, True)
    assert sum(r for *_, r in loop) > 0  # narrow out re-masked tokens
    for (trace, answer, nfe), (want, x, total, _) in zip(ours, loop, strict=True):
        assert trace == want and nfe == total  # the shadow's L mask tokens are part of each forward's input
        assert answer == (x[: x.index(EOS) + 1] if EOS in x else x)


def test_wino_shadow_block_is_refused_where_the_layout_cannot_run_it(tiny, tmp_path):
    with pytest.raises(ValueError, match=r"sampler\.verify: shadow: the shadow block needs context: recompute"):
        MaskedDiffusionDecoder(_adapter(tiny, tmp_path, 4, context="prefix_cache"), WinoConfig())
    MaskedDiffusionDecoder(_adapter(tiny, tmp_path, 4, context="prefix_cache"), WinoConfig(verify="self"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule",
    [
        SlowFastConfig(explore_steps=3, threshold=0.7, eos_early_stop=False),  # rows cut at their own span, padded
        KlassConfig(threshold=0.6, kl_threshold=0.2, kl_history=1, steps_per_block=4, eos_early_stop=False),
        WinoConfig(threshold=0.6, eos_early_stop=False),  # each row's shadow at its own block's positions
    ],
    ids=lambda r: r.name,
)
def test_rows_in_one_step_decode_as_each_alone(tiny, tmp_path, rule):
    dec = MaskedDiffusionDecoder(_adapter(tiny, tmp_path, 8), rule)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [30, 31], [40, 41, 42, 43, 44, 45, 46]]
    reqs = [GenerationRequest(f"c{i}", p, seed=0, max_new_tokens=24) for i, p in enumerate(prompts)]
    with torch.no_grad():
        together = dec.generate(reqs)
        streamed = {r.sample_id: r for r in dec.stream(iter(reqs), batch_size=2)}  # rows refilled mid-run
        alone = [dec.generate([r])[0] for r in reqs]
    assert [(r.token_ids, r.nfe) for r in together] == [(r.token_ids, r.nfe) for r in alone]
    assert [streamed[r.sample_id].token_ids for r in alone] == [r.token_ids for r in alone]
