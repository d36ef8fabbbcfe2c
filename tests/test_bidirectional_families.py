"""LLaDA (8B) and Dream decode as their authors' own routines do, on a tiny bidirectional model.

Each reference below is a plain loop written here from our reading of the published algorithm (LLaDA's
generate.py: the whole answer on the canvas, blocks from the prompt's end, each block's masks split evenly over its
steps, positions past the block never chosen; Dream's diffusion_generate: one canvas, `int(masks * (1 - s / t))`
positions per step on linspace(1, eps, steps + 1), ranked by top probability, margin or minus the entropy, logits
shifted by one). Greedy, our engine equals it token for token at batch 1 and 3, prompts of different lengths,
multi-block answers. Weights in float64 so that near-ties cannot flip between the two.
"""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from harness.runner.configs import check_family, run_name
from models.masked_diffusion import MaskedDiffusionAdapter
from samplers.config import SamplerConfigError
from samplers.masked import BlockRefinementConfig, LowConfidenceConfig
from tests.helpers.masked_twins import sharp_bidirectional

TEXTS = ["Hi", "The quick brown fox", "Once upon a"]
EOS = 1
EPS = 1e-3  # DreamGenerationConfig's default eps


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """The tiny bidirectional twin, its weights sharpened (tests.helpers.masked_twins)."""
    return sharp_bidirectional(tmp_path_factory.mktemp("bidir") / "m", 4)


def _llada(path, **kw) -> MaskedDiffusionAdapter:
    layout = {"canvas": "answer", "block_origin": "prompt", "block_length": 4, **kw}
    return MaskedDiffusionAdapter(
        str(path), dtype="float64", attention="bidirectional", context="recompute", eos_token_ids=[EOS],
        num_threads=1, **layout,
    )  # fmt: skip


def _dream(path, confidence="entropy") -> MaskedDiffusionAdapter:
    return _llada(path, block_length="answer", shifted_logits=True, schedule="dream", confidence=confidence)


def _bidirectional_logits(model, x: torch.Tensor) -> torch.Tensor:
    """The model over the whole canvas, every position seeing every other (as LLaDA / Dream run it)."""
    t = x.shape[1]
    mask = torch.zeros(x.shape[0], 1, t, t, dtype=model.dtype)
    return model(input_ids=x, attention_mask=mask, position_ids=torch.arange(t)[None]).logits


def _cut(seq: list[int]) -> list[int]:
    return seq[: seq.index(EOS) + 1] if EOS in seq else seq


def llada_reference(model, prompt, gen_length, block_length, steps, mask_id) -> tuple[list[int], int]:
    """LLaDA's generate.py, greedy, low-confidence remasking, as we read it: (answer cut after EOS, forwards).
    Its code asserts gen_length % block_length == 0; here the last block's slice is clipped otherwise."""
    p = len(prompt)
    x = torch.tensor([prompt + [mask_id] * gen_length])
    forwards = 0
    for b in range(math.ceil(gen_length / block_length)):
        lo, hi = p + b * block_length, p + (b + 1) * block_length
        n = int((x[0, lo:hi] == mask_id).sum())
        counts = [n // steps + (i < n % steps) for i in range(steps)]
        for i in range(steps):
            masked = x == mask_id
            logits = _bidirectional_logits(model, x)
            forwards += 1
            x0 = logits.argmax(-1)
            conf = torch.softmax(logits, -1).gather(-1, x0[..., None])[..., 0]
            conf[:, hi:] = -math.inf
            conf = torch.where(masked, conf, -math.inf)
            x0 = torch.where(masked, x0, x)
            pick = torch.topk(conf[0], counts[i]).indices
            x[0, pick] = x0[0, pick]
    return _cut(x[0, p:].tolist()), forwards


def dream_reference(model, prompt, max_new_tokens, steps, alg, mask_id) -> list[int]:
    """Dream's diffusion_generate (`_sample`), greedy, one row, as we read it: the answer cut after EOS."""
    p = len(prompt)
    x = torch.tensor([prompt + [mask_id] * max_new_tokens])
    ts = torch.linspace(1, EPS, steps + 1)
    for i in range(steps):
        masked = x == mask_id
        logits = _bidirectional_logits(model, x)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        probs = torch.softmax(logits[masked], dim=-1)
        conf, x0 = probs.max(-1)
        if alg == "topk_margin":
            top = probs.sort(-1, descending=True).values
            conf = top[:, 0] - top[:, 1]
        elif alg == "entropy":
            conf = (probs * torch.log(probs + 1e-10)).sum(-1)
        left = masked.sum() / masked.shape[0]
        k = int(left * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else int(left)
        full = torch.full(x.shape, -math.inf, dtype=logits.dtype)
        full[masked] = conf
        if k > 0:
            pick = torch.topk(full[0], k).indices
            cand = torch.full_like(x, mask_id)
            cand[masked] = x0
            x[0, pick] = cand[0, pick]
    return _cut(x[0, p:].tolist())


def _requests(ad, lengths) -> list[GenerationRequest]:
    return [GenerationRequest(str(i), ad.encode(t), seed=i, max_new_tokens=g) for i, (t, g) in enumerate(lengths)]


def _both_batches(ad, sampler, reqs) -> list[list[int]]:
    """Our tokens at batch 3 (one call) and batch 1 (one call a request): they must agree."""
    dec = MaskedDiffusionDecoder(ad, sampler)
    batched = [o.token_ids for o in dec.generate(reqs)]
    alone = [dec.generate([q])[0].token_ids for q in reqs]
    assert batched == alone
    return batched


@pytest.mark.parametrize("gen, steps", [(16, 4), (16, 2), (12, 3), (10, 4)])
def test_llada_equals_its_generate_whole_answer_canvas(path, gen, steps):
    """Blocks of 4 from the prompt's end, the whole answer on the canvas; gen 10 ends with a block of 2 (LLaDA's own
    code refuses that length: its loop with the slice clipped). Today's rule differs from the first block on."""
    ad = _llada(path)
    reqs = _requests(ad, [(t, gen) for t in TEXTS])
    sampler = LowConfidenceConfig(steps_per_block=steps)
    ours = _both_batches(ad, sampler, reqs)
    ref = [llada_reference(ad.model, q.prompt_ids, gen, 4, steps, ad.mask_id)[0] for q in reqs]
    assert ours == ref
    today = _both_batches(_llada(path, canvas="block", block_origin="absolute"), sampler, reqs)
    assert today != ref


def test_llada_counts_its_forwards_and_records_fills(path):
    """One forward per step until a block is filled (LLaDA runs every step; with steps <= block length each step
    fills a position, so the counts agree), TPF = tokens / forwards, fills and the trajectory kept."""
    ad = _llada(path)
    reqs = _requests(ad, [("The quick brown fox", 16)])
    res = MaskedDiffusionDecoder(ad, LowConfidenceConfig(steps_per_block=2, capture_trajectory=True)).generate(reqs)[0]
    ref, forwards = llada_reference(ad.model, reqs[0].prompt_ids, 16, 4, 2, ad.mask_id)
    assert res.token_ids == ref and res.finished_by == "length"
    assert res.nfe == forwards == 8 and res.steps_per_canvas == [2, 2, 2, 2]
    assert res.accepted_per_step == [[2, 2]] * 4 and res.tpf == 2
    assert [(t["canvas"], t["offset"], len(t["argmax"])) for t in res.trajectory[::2]] == [
        (b, 4 * b, 4) for b in range(4)
    ]


@pytest.mark.parametrize(
    "alg, confidence", [("maskgit_plus", "prob"), ("topk_margin", "margin"), ("entropy", "entropy")]
)
@pytest.mark.parametrize("steps", [5, 12])
def test_dream_equals_its_diffusion_generate(path, alg, confidence, steps):
    """One canvas of the whole answer, Dream's schedule and ranking, rows of different prompt and answer lengths in
    one batch (their blocks are of different lengths: padded with a hidden filler)."""
    ad = _dream(path, confidence)
    reqs = _requests(ad, [("Hi", 16), ("The quick brown fox", 13), ("Once upon a", 12)])
    ours = _both_batches(ad, LowConfidenceConfig(steps_per_block=steps), reqs)
    ref = [dream_reference(ad.model, q.prompt_ids, q.max_new_tokens, steps, alg, ad.mask_id) for q in reqs]
    assert ours == ref


def test_dream_schedule_is_not_the_even_split_and_the_sampler_can_choose(path):
    """The sampler's null schedule / confidence take the model's (dream / entropy); set, they override it; the run's
    describe() records what was used."""
    ad = _dream(path)
    reqs = _requests(ad, [(t, 16) for t in TEXTS])
    ref = [dream_reference(ad.model, q.prompt_ids, 16, 5, "entropy", ad.mask_id) for q in reqs]
    dec = MaskedDiffusionDecoder(ad, LowConfidenceConfig(steps_per_block=5))
    assert dec.describe()["decode"] == {
        "canvas": "answer", "block_origin": "prompt", "schedule": "dream", "confidence": "entropy",
        "block_length": "answer",
    }  # fmt: skip
    even = MaskedDiffusionDecoder(ad, LowConfidenceConfig(steps_per_block=5, schedule="even", confidence="prob"))
    assert even.describe()["decode"]["schedule"] == "even"
    assert [o.token_ids for o in even.generate(reqs)] != ref
    assert [o.token_ids for o in dec.generate(reqs)] == ref


def test_a_threshold_rule_runs_on_the_whole_answer_canvas(path):
    """Other samplers decode on the family's layout too: threshold fills (on the probability) with the ranking's
    share as the minimum; every answer position is filled and the row ends."""
    ad = _llada(path)
    reqs = _requests(ad, [(t, 12) for t in TEXTS])
    out = MaskedDiffusionDecoder(ad, BlockRefinementConfig(threshold=0.5, steps_per_block=4)).generate(reqs)
    assert all(ad.mask_id not in o.token_ids and o.token_ids for o in out)


def _model_cfg(**kw):
    base = {
        "_target_": "models.masked_diffusion.MaskedDiffusionAdapter", "path": "org/model", "attention": "bidirectional",
        "context": "recompute", "mask_token_id": 5, "block_length": 4, "shifted_logits": False,
    }  # fmt: skip
    return OmegaConf.create({**base, **kw})


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"canvas": "whole"}, "model.canvas"),
        ({"canvas": "answer", "context": "prefix_cache"}, "model.canvas=answer"),
        ({"canvas": "answer", "attention": "block_causal", "context": "cache"}, "model.canvas=answer"),
        ({"block_origin": "prompt", "attention": "block_causal", "context": "cache"}, "model.block_origin=prompt"),
        ({"block_length": "answer"}, "model.block_length=answer"),
        ({"schedule": "cosine"}, "model.schedule"),
        ({"confidence": "logit"}, "model.confidence"),
    ],
)
def test_bad_layouts_fail_before_loading_naming_the_key(kw, key):
    sampler = OmegaConf.create({"name": "low_confidence", "family": "masked", "block_length": None})
    with pytest.raises(ValueError, match=key):
        check_family(_model_cfg(**kw), sampler)


def test_sampler_schedule_and_confidence_are_checked():
    with pytest.raises(SamplerConfigError, match="sampler.schedule"):
        LowConfidenceConfig(schedule="linear")
    with pytest.raises(SamplerConfigError, match="sampler.confidence"):
        LowConfidenceConfig(confidence="max")


@pytest.mark.parametrize(
    "name, layout",
    [
        ("llada_8b_instruct", ("answer", "prompt", 32, "even", "prob")),
        ("dream", ("answer", "prompt", "answer", "dream", "entropy")),
    ],
)
def test_shipped_yamls_name_their_own_layout(name, layout):
    cfg = OmegaConf.load(f"conf/model/{name}.yaml")
    assert (cfg.canvas, cfg.block_origin, cfg.block_length, cfg.schedule, cfg.confidence) == layout
    check_family(cfg, OmegaConf.create({"name": "low_confidence", "family": "masked", "block_length": None}))


def test_unset_schedule_and_confidence_keep_a_masked_run_identity():
    """Runs from before these knobs resume into the same run dir when they are left null; set, they are named."""
    model = _model_cfg(name="m", path="outputs/tiny/masked")
    old = OmegaConf.create({"name": "low_confidence", "family": "masked", "steps_per_block": 8})
    new = OmegaConf.create({**OmegaConf.to_container(old), "schedule": None, "confidence": None})
    ev = OmegaConf.create({"name": "prompts"})
    assert run_name(model, new, ev, 0, 1) == run_name(model, old, ev, 0, 1)
    named = OmegaConf.create({**OmegaConf.to_container(old), "schedule": "dream", "confidence": None})
    assert "scheduledream" in run_name(model, named, ev, 0, 1)
