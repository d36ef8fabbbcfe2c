"""The block-causal masked families decode as their own code does, on tiny block-causal twins (greedy, float64).

References from outside our decode: diffusers' LLaDA2Pipeline running a model that reads the pipeline's 2D mask as
transformers reads padding (`_ReadsPaddingAsTransformers`: transformers' own mask functions, none of ours), and
plain loops written here from LLaDA 2.1's `LLaDA2MoeModelLM.generate` (its modeling file) and SDAR's
`block_diffusion_generate` (JetAstra/SDAR generate.py) as read. Every prompt's last block runs past prompt + new
tokens, where the tail rules differ: LLaDA 2.1 and SDAR attend the tail (`tail=visible`), the pipeline hides it
(`tail=hidden`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from diffusers import BlockRefinementScheduler, LLaDA2Pipeline
from transformers import DynamicCache

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from models.masked_diffusion import MaskedDiffusionAdapter
from models.tiny import build_masked
from samplers.masked import BlockRefinementConfig, LLaDA2EditingConfig

TEXTS = ["Hi", "The quick brown", "Once upon a time there", "abc", "Write a poem about the sea", "x=1;", "Q: 2+2?"]
CONF = Path(__file__).resolve().parents[1] / "conf" / "model"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("block_causal")
    return {n: build_masked(root / f"L{n}", block_length=n) for n in (4, 8)}


def _adapter(path, tail, context="cache", eos=1):
    kw = dict(dtype="float64", context=context, eos_token_ids=[eos], num_threads=1, tail=tail)
    return MaskedDiffusionAdapter(str(path), **kw)


def _requests(ad, block, g):
    """g new tokens, or g + 1 where prompt + g fills whole blocks: every last block runs past the request (the tail
    the rules disagree on)."""
    ids = [ad.encode(t) for t in TEXTS]
    reqs = [
        GenerationRequest(str(i), p, seed=i, max_new_tokens=g + (not (len(p) + g) % block)) for i, p in enumerate(ids)
    ]
    assert all((len(q.prompt_ids) + q.max_new_tokens) % block for q in reqs)
    return reqs


def _ours(ad, cfg, reqs):
    """Batch 1 (each prompt alone) and batch 3 (rows refilled as they finish): the same results, returned once."""
    alone = [MaskedDiffusionDecoder(ad, cfg).generate([q])[0] for q in reqs]
    three = {r.sample_id: r for r in MaskedDiffusionDecoder(ad, cfg).stream(reqs, batch_size=3)}
    assert [three[q.sample_id].token_ids for q in reqs] == [r.token_ids for r in alone]
    assert [three[q.sample_id].nfe for q in reqs] == [r.nfe for r in alone]
    return alone


def _frequent_token(path, block) -> int:
    """The token the tiny model writes most: as EOS, rows stop early and the EOS rules are exercised."""
    ad = _adapter(path, "visible")
    out = _ours(ad, LLaDA2EditingConfig(editing_threshold=None), _requests(ad, block, 21))
    return Counter(t for r in out for t in r.token_ids).most_common(1)[0][0]


def _cut(seq: list[int], eos: set[int]) -> list[int]:
    first = next((i for i, t in enumerate(seq) if t in eos), None)
    return seq if first is None else seq[: first + 1]


def _greedy(logits):
    prob, tok = torch.softmax(logits.float(), dim=-1).max(dim=-1)
    return tok, prob


def _block_causal(total: int, block: int) -> torch.Tensor:
    """(total, total) bool: query i sees key j when j's block is not after i's; no position hidden."""
    blk = torch.arange(total) // block
    return blk[None, :] <= blk[:, None]


# --------------------------------------------------------------------------------------------------
# references


class _ReadsPaddingAsTransformers(torch.nn.Module):
    """The tiny twin as LLaDA2Pipeline calls a model (`input_ids`, a 2D mask, `position_ids`), its 2D mask read as
    transformers reads padding: `create_causal_mask` with the blocks as `block_sequence_ids` (bidirectional within a
    block, causal across blocks), a 0 hiding that key from every query."""

    def __init__(self, inner, block: int):
        super().__init__()
        self.inner, self.block, self.config = inner, block, inner.config

    @property
    def device(self):
        return self.inner.device

    @property
    def dtype(self):
        return self.inner.dtype

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        from transformers.masking_utils import create_causal_mask

        mask = create_causal_mask(
            config=self.config, inputs_embeds=self.inner.get_input_embeddings()(input_ids),
            attention_mask=attention_mask, past_key_values=None, position_ids=position_ids,
            block_sequence_ids=position_ids // self.block, allow_is_causal_skip=False,
        )  # fmt: skip
        return self.inner(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False)


def _pipeline(ad, block, prompt, g, cfg, eos) -> tuple[list[int], int]:
    """LLaDA2Pipeline on one prompt (the model reads its 2D mask as transformers reads padding): tokens cut after
    the first EOS, and its forwards."""
    model = _ReadsPaddingAsTransformers(ad.model, block)
    pipe = LLaDA2Pipeline(model=model, scheduler=BlockRefinementScheduler(), tokenizer=ad.tokenizer)
    pipe.set_progress_bar_config(disable=True)
    forwards = [0]

    def count(pipe, i, t, kwargs):
        forwards[0] += 1
        return kwargs

    seq = pipe(
        input_ids=torch.tensor([prompt]), use_chat_template=False, gen_length=g, block_length=block,
        num_inference_steps=cfg.steps_per_block, temperature=0.0, threshold=cfg.threshold,
        editing_threshold=cfg.editing_threshold, max_post_steps=cfg.max_post_steps, minimal_topk=cfg.minimal_topk,
        eos_token_id=eos, mask_token_id=ad.mask_id, output_type="seq", callback_on_step_end=count,
    ).sequences[0].tolist()  # fmt: skip
    return _cut(seq, {eos}), forwards[0]


def _llada21_generate(model, prompt, block, g, thr, edit_thr, max_post, eos, mask, k=1) -> tuple[list[int], int]:
    """LLaDA 2.1's own generate as read (batch 1, greedy, eos_early_stop): the whole prefix every forward under a
    block-causal additive mask with nothing hidden; fill every mask above `thr`, else the `k` most confident; edit
    committed non-prompt tokens predicted otherwise above `edit_thr`; a forward after the block's last mask counts
    against `max_post` before it runs; EOS looked for when a block ends. Its way to switch editing off is a
    threshold no probability exceeds (1.0)."""
    p = len(prompt)
    n_blocks = -(-(p + g) // block)
    total = n_blocks * block
    x = torch.full((total,), mask)
    x[:p] = torch.tensor(prompt)
    pos = torch.arange(total)
    bias = torch.zeros(total, total, dtype=model.dtype).masked_fill(~_block_causal(total, block), -torch.inf)
    forwards = 0
    for b in range(p // block, n_blocks):
        end, post = (b + 1) * block, 0
        editable = pos[end - block : end] >= p
        while True:
            cur = x[end - block : end].clone()
            active = cur == mask
            post += int(not active.any())
            if post > max_post:
                break
            out = model(
                input_ids=x[None, :end], attention_mask=bias[None, None, :end, :end], position_ids=pos[None, :end]
            )
            forwards += 1
            tok, prob = _greedy(out.logits[0, -block:])
            fill = torch.zeros(block, dtype=torch.bool)
            if active.any():
                conf = torch.where(active, prob, -torch.inf)
                high = conf > thr
                if high.sum() >= k:
                    fill = high
                else:
                    fill[conf.topk(min(k, int(active.sum()))).indices] = True
            edit = ~active & editable & (prob > edit_thr) & (tok != cur)
            x[end - block : end] = torch.where(fill | edit, tok, cur)
            if not active.any() and not edit.any():
                break
        if (x[p:end] == eos).any():
            break
    return _cut(x[p : p + g].tolist(), {eos}), forwards


def _sdar_generate(model, prompt, block, g, steps, thr, stops, mask, topk_in_masks=False, whole=False):
    """SDAR's block_diffusion_generate as read (greedy, low_confidence_dynamic): the prompt's whole blocks prefilled
    into a K/V cache; each block's forwards read it without storing their own K/V (here: cropped away), and one
    more forward stores the finished block's; nothing hidden; stop ids looked for when a block ends. Each step's
    share comes from the block length; where it exceeds the masks left, its `topk` also takes positions of
    confidence -inf (committed or prompt tokens) and rewrites them: `topk_in_masks` takes only masked ones.
    `whole`: the whole canvas (prompt included) instead of the cut answer."""
    p = len(prompt)
    n_blocks = -(-(p + g) // block)
    total = n_blocks * block
    x = torch.full((total,), mask)
    x[:p] = torch.tensor(prompt)
    pos, seen = torch.arange(total), _block_causal(total, block)
    base, rem = divmod(block, steps)
    shares = [base + (i < rem) for i in range(steps)]
    cache = DynamicCache()

    def forward(s, e, store):
        kw = dict(attention_mask=seen[None, None, s:e, :e], position_ids=pos[None, s:e], use_cache=True)
        out = model(input_ids=x[None, s:e], past_key_values=cache, **kw)
        if not store:
            cache.crop(-(e - s))
        return out.logits[0]

    if p // block:
        forward(0, p // block * block, True)
    for b in range(p // block, n_blocks):
        s, e = b * block, (b + 1) * block
        for step in range(steps + 1):
            active = x[s:e] == mask
            if not active.any():
                forward(s, e, True)
                break
            tok, prob = _greedy(forward(s, e, False))
            conf = torch.where(active, prob, -torch.inf)
            fill = conf > thr
            if fill.sum() < shares[step]:
                fill = torch.zeros(block, dtype=torch.bool)
                fill[conf.topk(min(shares[step], int(active.sum())) if topk_in_masks else shares[step]).indices] = 1
            x[s:e] = torch.where(fill, tok, x[s:e])
        if any(t in stops for t in x[p:].tolist()):
            break
    return x.tolist() if whole else _cut(x[p : p + g].tolist(), stops)


# --------------------------------------------------------------------------------------------------
# the pipeline's tail rule


@pytest.mark.parametrize("context", ["cache", "recompute"])
@pytest.mark.parametrize("block", [4, 8])
def test_hidden_tail_equals_llada2_pipeline_reading_its_mask_as_transformers(checkpoints, block, context):
    """`tail=hidden`: ours at batch 1 and 3 equals LLaDA2Pipeline token for token and forward for forward (editing
    on, so no no-op forward), on prompts whose last block runs 1 to block - 1 positions past the request; the default
    `tail=visible` does not."""
    eos = _frequent_token(checkpoints[block], block)
    ad = _adapter(checkpoints[block], "hidden", context, eos)
    reqs = _requests(ad, block, 21)
    cfg = BlockRefinementConfig(threshold=0.8, editing_threshold=0.5, steps_per_block=4)
    theirs = [_pipeline(ad, block, q.prompt_ids, q.max_new_tokens, cfg, eos) for q in reqs]
    for q, o, t in zip(reqs, _ours(ad, cfg, reqs), theirs, strict=True):
        assert (o.token_ids, o.nfe) == t, q.sample_id
    # the shipped default, `tail: visible` (LLaDA 2.1's own generate's rule, and SDAR's), is not the pipeline's: it
    # attends the tail and decodes a prompt of these otherwise (docs/masked.md, "Checked against diffusers")
    for name in ("llada2_mini", "tiny_masked", "sdar"):
        assert yaml.safe_load((CONF / f"{name}.yaml").read_text())["tail"] == "visible"
    if context == "recompute":
        return  # the visible rule decodes the same on both paths (tests/test_masked_decode.py): checked once
    visible = _ours(_adapter(checkpoints[block], "visible", context, eos), cfg, reqs)
    assert any((v.token_ids, v.nfe) != t for v, t in zip(visible, theirs, strict=True))


PIPELINE_SETTINGS = {  # more of the pipeline's settings than the test above's (threshold 0.8, editing 0.5)
    "off0.9": dict(threshold=0.9, editing_threshold=None),
    "edit0.3-post2": dict(threshold=0.5, editing_threshold=0.3, max_post_steps=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PIPELINE_SETTINGS))
@pytest.mark.parametrize("block", [4, 8])
def test_tail_hidden_equals_the_pipeline_at_other_settings(checkpoints, block, name):
    """`tail=hidden` against LLaDA2Pipeline at more settings (13 new tokens): token for token, and forward for forward
    with editing on (off, the pipeline spends a no-op forward on a block whose masks are all filled)."""
    eos = _frequent_token(checkpoints[block], block)
    cfg = BlockRefinementConfig(steps_per_block=4, **PIPELINE_SETTINGS[name])
    ad = _adapter(checkpoints[block], "hidden", "cache", eos)
    reqs = _requests(ad, block, 13)
    for q, o in zip(reqs, _ours(ad, cfg, reqs), strict=True):
        tokens, nfe = _pipeline(ad, block, q.prompt_ids, q.max_new_tokens, cfg, eos)
        assert o.token_ids == tokens and (cfg.editing_threshold is None or o.nfe == nfe), q.sample_id


# --------------------------------------------------------------------------------------------------
# LLaDA 2.1's own generate


LLADA21 = {
    "edit0.5": dict(threshold=0.7, editing_threshold=0.5, max_post_steps=16),
    "edit0.3-post2": dict(threshold=0.5, editing_threshold=0.3, max_post_steps=2),
    "edit0-post1": dict(threshold=0.9, editing_threshold=0.0, max_post_steps=1),
    "off": dict(threshold=0.7, editing_threshold=None),
}


@pytest.mark.parametrize("eos_kind", ["rare", "frequent"])
@pytest.mark.parametrize("name", list(LLADA21))
@pytest.mark.parametrize("block", [4, 8])
def test_llada2_editing_equals_llada21_generate(checkpoints, block, name, eos_kind):
    """`llada2_editing` with `tail=visible` (the cache path) equals LLaDA 2.1's generate token for token at batch 1
    and 3, and forward for forward with editing on (off: its generate spends one no-op forward per block, we do
    not). diffusers' rule on the same knobs decodes otherwise somewhere here (its extra editing forward, its EOS
    freeze), so these cases tell the two rules apart."""
    path = checkpoints[block]
    eos = 1 if eos_kind == "rare" else _frequent_token(path, block)
    ad = _adapter(path, "visible", "cache", eos)
    cfg = LLaDA2EditingConfig(**LLADA21[name])
    reqs = _requests(ad, block, 19)
    ours = _ours(ad, cfg, reqs)
    edit_thr = 1.0 if cfg.editing_threshold is None else cfg.editing_threshold
    knobs = (cfg.threshold, edit_thr, cfg.max_post_steps, eos, ad.mask_id)
    for q, o in zip(reqs, ours, strict=True):
        ref, forwards = _llada21_generate(ad.model, q.prompt_ids, block, q.max_new_tokens, *knobs)
        assert o.token_ids == ref, q.sample_id
        assert o.nfe == forwards - (len(o.steps_per_canvas) if not cfg.editing else 0), q.sample_id
    if cfg.editing:
        assert sum(o.extra.get("edited", 0) for o in ours) > 0
        kw = {k: v for k, v in LLADA21[name].items() if k != "editing_threshold"}
        other = BlockRefinementConfig(steps_per_block=block, editing_threshold=edit_thr or 1e-9, **kw)
        theirs = _ours(ad, other, reqs)
        assert [(o.token_ids, o.nfe) for o in theirs] != [(o.token_ids, o.nfe) for o in ours]


def test_llada2_editing_recompute_equals_cache(checkpoints):
    """The recompute path decodes the cache path's tokens in as many forwards, rows ending at EOS included."""
    eos = _frequent_token(checkpoints[4], 4)
    cfg = LLaDA2EditingConfig(threshold=0.5, editing_threshold=0.3)
    cached, full = (_adapter(checkpoints[4], "visible", c, eos) for c in ("cache", "recompute"))
    reqs = _requests(cached, 4, 19)
    a, b = _ours(cached, cfg, reqs), _ours(full, cfg, reqs)
    assert [(o.token_ids, o.nfe) for o in a] == [(o.token_ids, o.nfe) for o in b]
    assert any(o.finished_by == "eos" for o in a)


# --------------------------------------------------------------------------------------------------
# SDAR's own generate


@pytest.mark.parametrize("eos_kind", ["rare", "frequent"])
@pytest.mark.parametrize("block", [4, 8])
def test_sdar_cache_path_equals_block_diffusion_generate(checkpoints, block, eos_kind):
    """SDAR's shipped rule (`block_refinement`, threshold 0.85, one step per block position) on the cache path with
    `tail=visible` equals its block_diffusion_generate token for token at batch 1 and 3 (it spends one more forward
    per block to store the block's K/V; ours folds that into the next block's first step)."""
    path = checkpoints[block]
    eos = 1 if eos_kind == "rare" else _frequent_token(path, block)
    ad = _adapter(path, "visible", "cache", eos)
    cfg = BlockRefinementConfig(threshold=0.85, steps_per_block=block)
    reqs = _requests(ad, block, 21)
    for q, o in zip(reqs, _ours(ad, cfg, reqs), strict=True):
        ref = _sdar_generate(ad.model, q.prompt_ids, block, q.max_new_tokens, block, 0.85, {eos}, ad.mask_id)
        assert o.token_ids == ref, q.sample_id


@pytest.mark.slow  # ours at batch 1 and 3 plus two reference loops over 7 prompts
@pytest.mark.parametrize(("block", "steps", "thr"), [(4, 2, 0.3), (4, 1, 0.5), (8, 4, 0.99), (8, 2, 0.3)])
def test_sdar_dynamic_below_one_step_per_position_equals_its_generate_with_topk_in_masks(
    checkpoints, block, steps, thr
):
    """Item 7 of issue 54: SDAR's rule at fewer steps than block positions (shares > 1), prompts whose blocks start
    inside the prompt, batch 1 and 3. Ours equals its block_diffusion_generate where its `topk` takes only masked
    positions; as written, it rewrites committed answer tokens and even prompt tokens of the first block whenever a
    share exceeds the masks left (differs by design: docs/masked.md "Hub families at other shapes"). Ours never
    changes the prompt."""
    path = checkpoints[block]
    ad = _adapter(path, "visible", "cache")
    cfg = BlockRefinementConfig(threshold=thr, steps_per_block=steps)
    reqs = _requests(ad, block, 23)
    rewrites = 0
    for q, o in zip(reqs, _ours(ad, cfg, reqs), strict=True):
        args = (ad.model, q.prompt_ids, block, q.max_new_tokens, steps, thr, {1}, ad.mask_id)
        assert o.token_ids == _sdar_generate(*args, topk_in_masks=True), q.sample_id
        as_written = _sdar_generate(*args, whole=True)
        rewrites += (
            as_written[: len(q.prompt_ids)] != q.prompt_ids
            or _cut(as_written[len(q.prompt_ids) : len(q.prompt_ids) + q.max_new_tokens], {1}) != o.token_ids
        )
    assert rewrites > 0  # the setting reaches the routine's rewrite: what this test holds ours apart from


# --------------------------------------------------------------------------------------------------
# the shipped llada2_mini yaml


class _SquareMaskOnly(torch.nn.Module):
    """LLaDA 2.1's forward as its hub file checks the mask (the error an outside check met on the shipped yaml's
    cache path): a 4D mask must be (B, 1, Q, Q), Q the query length; the network underneath is the tiny twin."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.generation_config = inner, inner.config, inner.generation_config

    @property
    def device(self):
        return self.inner.device

    @property
    def dtype(self):
        return self.inner.dtype

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                **kwargs):  # fmt: skip
        b, q = input_ids.shape
        if tuple(attention_mask.shape) != (b, 1, q, q):
            raise ValueError(
                f"LLaDA2.0 only support block attention mask with shape: {(b, 1, q, q)}, the input attention with "
                f"shape {list(attention_mask.shape)}"
            )
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            past_key_values=past_key_values, use_cache=use_cache,
        )  # fmt: skip


def _shipped(path, context=None):
    """An adapter with conf/model/llada2_mini.yaml's decode keys (the tiny twin's weights, CPU, float64), its model
    behind LLaDA 2.1's mask check."""
    cfg = yaml.safe_load((CONF / "llada2_mini.yaml").read_text())
    keys = ("attention", "context", "shifted_logits", "tail", "mask_form", "forward_kwargs")
    kw = {k: cfg[k] for k in keys if k in cfg} | ({"context": context} if context else {})
    ad = MaskedDiffusionAdapter(str(path), dtype="float64", num_threads=1, eos_token_ids=[1], **kw)
    ad.bind(_SquareMaskOnly(ad.model), ad.tokenizer, None, None, [1])
    return ad


def test_llada2_mini_yaml_runs_as_shipped_and_decodes_as_its_generate(checkpoints):
    """The shipped keys pass LLaDA 2.1's mask check and decode its generate's tokens (`llada2_editing`, its
    published Quality-mode defaults); the cache path's wider mask is what its check refuses."""
    ad, cfg = _shipped(checkpoints[8]), LLaDA2EditingConfig()
    reqs = _requests(ad, 8, 19)
    knobs = (cfg.threshold, cfg.editing_threshold, cfg.max_post_steps, 1, ad.mask_id)
    for q, o in zip(reqs, _ours(ad, cfg, reqs), strict=True):
        assert o.token_ids == _llada21_generate(ad.model.inner, q.prompt_ids, 8, q.max_new_tokens, *knobs)[0]
    with pytest.raises(ValueError, match="only support block attention mask"):
        MaskedDiffusionDecoder(_shipped(checkpoints[8], "cache"), cfg).generate(reqs[:1])


def test_a_tail_query_still_sees_the_prompt(checkpoints):
    """`tail=hidden` hides the tail's keys from every query, their own included: a tail query must still see the
    prompt and the block's real positions, else its softmax runs over no key (NaN). Finite logits everywhere,
    and the real positions' logits differ between the two rules (the tail is attended or not)."""
    from models.masked_diffusion import BlockQuery

    ids = _adapter(checkpoints[8], "visible").encode("Hello world")
    m = len(ids)
    got = {}
    for tail in ("visible", "hidden"):
        for context in ("cache", "recompute"):
            ad = _adapter(checkpoints[8], tail, context)
            q = BlockQuery(0, ids[: m // 8 * 8], ids[m // 8 * 8 :] + [ad.mask_id] * (8 - m % 8), m + 1)
            got[tail, context] = ad.forward(ad.open(1), [q], 8)[0]
            assert torch.isfinite(got[tail, context]).all()
    torch.testing.assert_close(got["visible", "cache"], got["visible", "recompute"], rtol=0, atol=1e-10)
    torch.testing.assert_close(got["hidden", "cache"], got["hidden", "recompute"], rtol=0, atol=1e-10)
    assert not torch.allclose(got["visible", "cache"][: m % 8 + 1], got["hidden", "cache"][: m % 8 + 1])


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model=llada2_mini", "sampler=llada2_editing", "model.tail=padding"], "model.tail"),
        (["model=llada2_mini", "sampler=llada2_editing", "sampler.num_to_transfer=0"], "sampler.num_to_transfer"),
        (["model=llada2_mini", "sampler=llada2_editing", "sampler.editing_threshold=1.5"], "sampler.editing_threshold"),
    ],
)
def test_bad_tail_and_editing_knobs_fail_before_loading(overrides, match):
    """Through the real Hydra app (hub models: nothing loads): the new keys are checked and named."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from harness.runner.plan import decoder_plan
    from tests.helpers.app import compose_app

    cfg = compose_app(*overrides)
    with pytest.raises((ValueError, InstantiationException), match=match):
        decoder_plan(cfg.model, cfg.sampler)
        instantiate(cfg.sampler)


def test_llada2_editing_composes_with_its_published_defaults():
    """`sampler=llada2_editing` with no other override: LLaDA 2.1's Quality mode; 0 is its full-editing setting
    (diffusers reads 0 as off: block_refinement refuses it)."""
    from hydra.utils import instantiate

    from samplers.config import SamplerConfigError
    from tests.helpers.app import compose_app

    cfg = instantiate(compose_app("model=llada2_mini", "sampler=llada2_editing").sampler)
    assert (cfg.name, cfg.threshold, cfg.editing_threshold, cfg.max_post_steps) == ("llada2_editing", 0.7, 0.5, 16)
    assert (
        LLaDA2EditingConfig(editing_threshold=0.0).editing and not LLaDA2EditingConfig(editing_threshold=None).editing
    )
    with pytest.raises(SamplerConfigError, match="sampler.editing_threshold"):
        BlockRefinementConfig(editing_threshold=0.0)
