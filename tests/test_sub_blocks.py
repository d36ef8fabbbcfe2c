"""A block decoded as sub-blocks (`model.sub_block`, Fast-dLLM v2's small blocks): the rule fills one sub-block at a
time, left to right, each forward running the whole block over what came before. Checked against a plain loop
written here from Fast-dLLM v2's published loop (blocks from the prompt's end; per sub-block, until it has no mask:
forward the block, fill its masked positions with probability > threshold, at least the most confident one), on a
tiny bidirectional model in float64, greedy, at batch 1 and 3."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from harness.runner.configs import check_family
from models.loading.masked_checks import DecodeLayout
from models.masked_diffusion import MaskedDiffusionAdapter
from samplers.masked import FastDllmConfig
from tests.helpers.masked_twins import sharp_bidirectional

TEXTS = ["Hi", "The quick brown fox", "Once upon a"]
EOS, BLOCK, SUB = 1, 8, 4


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """The tiny bidirectional twin, sharpened so that confidences spread and fill orders differ."""
    return sharp_bidirectional(tmp_path_factory.mktemp("sub") / "m", BLOCK)


def _adapter(path, **kw) -> MaskedDiffusionAdapter:
    return MaskedDiffusionAdapter(
        str(path), dtype="float64", attention="bidirectional", context="recompute", block_origin="prompt",
        eos_token_ids=[EOS], num_threads=1, **kw,
    )  # fmt: skip


def sub_block_reference(model, prompt, gen, threshold, mask_id) -> tuple[list[int], int]:
    """Fast-dLLM v2's block / sub-block loop as we read it (no cache, greedy): (answer cut after EOS, forwards)."""
    x, forwards = list(prompt), 0
    for _ in range(math.ceil(gen / BLOCK)):
        start = len(x)
        x += [mask_id] * min(BLOCK, len(prompt) + gen - start)
        for lo in range(start, len(x), SUB):
            hi = min(lo + SUB, len(x))
            while mask_id in x[lo:hi]:
                ids = torch.tensor([x])
                mask = torch.zeros(1, 1, len(x), len(x), dtype=model.dtype)
                logits = model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(len(x))[None]).logits
                forwards += 1
                p, tok = torch.softmax(logits[0, lo:hi], -1).max(-1)
                p = torch.where(torch.tensor(x[lo:hi]) == mask_id, p, -math.inf)
                pick = (p > threshold).tolist()
                pick[int(p.argmax())] = True
                for i, ok in enumerate(pick):
                    if ok and x[lo + i] == mask_id:
                        x[lo + i] = int(tok[i])
        if EOS in x[len(prompt) :]:  # the answer up to its first EOS is final (nothing before it is masked)
            break
    out = x[len(prompt) :]
    return (out[: out.index(EOS) + 1] if EOS in out else out), forwards


@pytest.mark.slow
@pytest.mark.parametrize("gen, threshold", [(16, 0.9), (12, 0.5), (16, 0.0)])
def test_sub_blocks_decode_as_the_block_sub_block_loop(path, gen, threshold):
    ad = _adapter(path, sub_block=SUB)
    reqs = [GenerationRequest(str(i), ad.encode(t), seed=i, max_new_tokens=gen) for i, t in enumerate(TEXTS)]
    dec = MaskedDiffusionDecoder(ad, FastDllmConfig(threshold=threshold))
    assert dec.describe()["decode"]["sub_block"] == SUB
    ours = dec.generate(reqs)
    assert [dec.generate([q])[0].token_ids for q in reqs] == [o.token_ids for o in ours]
    ref = [sub_block_reference(ad.model, q.prompt_ids, gen, threshold, ad.mask_id) for q in reqs]
    assert [o.token_ids for o in ours] == [r[0] for r in ref]
    # every sub-block's forwards counted in its block (a row may stop at an EOS before the reference's block end)
    assert all(o.nfe <= r[1] for o, r in zip(ours, ref, strict=True))


@pytest.mark.slow
def test_a_sub_block_of_the_whole_block_is_the_block_and_a_smaller_one_is_not(path):
    reqs = [GenerationRequest(str(i), [10 + i, 11, 12], seed=i, max_new_tokens=16) for i in range(3)]
    cfg = FastDllmConfig(threshold=0.0)
    plain = [o.token_ids for o in MaskedDiffusionDecoder(_adapter(path), cfg).generate(reqs)]
    whole = [o.token_ids for o in MaskedDiffusionDecoder(_adapter(path, sub_block=BLOCK), cfg).generate(reqs)]
    assert whole == plain
    # trajectories: no position of a later sub-block is filled while an earlier one still holds a mask
    cfg = FastDllmConfig(threshold=0.0, capture_trajectory=True)
    sub = MaskedDiffusionDecoder(_adapter(path, sub_block=SUB), cfg).generate(reqs)
    assert [o.token_ids for o in sub] != plain and all(o.nfe == 2 * 2 for o in sub)  # 2 blocks of 2 sub-blocks
    for res in sub:
        for entry in res.trajectory:
            masks = [p for p, t in enumerate(entry["argmax"]) if t == entry["mask_id"]]
            filled = [p for p in range(len(entry["argmax"])) if p not in masks]
            assert not masks or not filled or max(p // SUB for p in filled) <= min(p // SUB for p in masks)


def test_the_layout_answers_where_blocks_and_sub_blocks_lie():
    lay = DecodeLayout(block_origin="prompt", sub_block=3, block_length=8)
    span = lay.span(5, 12)
    assert (span.origin, span.start, span.end, span.width) == (5, 5, 17, 8)
    assert span.size_at(13) == 4 and lay.window_width(8) == 3
    assert lay.windows([9, 9, 9, 7, 7, 7, 7, 7], mask_id=7) == [(3, 6), (6, 8)]  # the first sub-block: no mask
    assert DecodeLayout(block_length=8).windows([7] * 8, 7) == [(0, 8)]
    absolute = DecodeLayout(block_length=4).span(6, 5)
    assert (absolute.origin, absolute.start, absolute.end) == (0, 4, 12)
    seeded = DecodeLayout(block_origin="prompt", seeded=True, block_length=4).span(3, 5)
    assert seeded.end == 3 + 8  # an AR-seeded model's last block runs whole
    assert DecodeLayout(canvas="answer").canvas_end(9) == 9 and DecodeLayout().canvas_end(9) == 0
    assert "sub_block" not in DecodeLayout().describe()


@pytest.mark.parametrize("value", [0, "4", True])
def test_a_bad_sub_block_fails_before_loading(value):
    model = OmegaConf.create(
        {"_target_": "models.masked_diffusion.MaskedDiffusionAdapter", "path": "x", "attention": "bidirectional",
         "context": "recompute", "mask_token_id": 5, "block_length": 8, "sub_block": value}
    )  # fmt: skip
    with pytest.raises(ValueError, match="model.sub_block"):
        check_family(model, OmegaConf.create({"name": "fast_dllm_masked", "family": "masked", "block_length": None}))
