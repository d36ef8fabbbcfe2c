"""The masked decoder against diffusers' LLaDA2Pipeline + BlockRefinementScheduler on tiny block-causal models.

The pipeline runs the very model we decode (`ReferenceModel`: its 2D mask read as transformers reads padding, by
transformers' own mask functions; our adapter runs with the pipeline's tail rule, `tail=hidden`). Weights in
float64, so a near-tie of two confidences cannot flip between the pipeline's whole-prefix forwards and our cached
ones. Greedy: token for token, at batch 1 and 8, block lengths 4 and 8, editing on and
off, prompts of different lengths, EOS rare and frequent; the exact cache equals full recompute.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from diffusers import BlockRefinementScheduler, LLaDA2Pipeline

from contract.records import GenerationRequest
from harness.engine.decoders import decoder_for
from harness.engine.masked import MaskedDiffusionDecoder
from models.masked_diffusion import MaskedDiffusionAdapter, ReferenceModel
from models.tiny import build_masked
from samplers.config import EntropyBoundConfig
from samplers.masked import BlockRefinementConfig, FastDllmConfig, LowConfidenceConfig, ReMDMConfig

TEXTS = [
    "Hi",
    "The quick brown",
    "Once upon a time there",
    "abc",
    "Write a poem about the sea, please",
    "x=1;",
    "Hello world, how",
    "Q: 2+2?",
]
G = 24  # new tokens: 3 to 7 blocks


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("masked")
    return {n: build_masked(root / f"L{n}", block_length=n) for n in (4, 8)}


def _adapter(path, context="cache", eos=1):
    """The pipeline's tail rule (its 2D mask read as transformers reads padding: `ReferenceModel`)."""
    return MaskedDiffusionAdapter(
        str(path), dtype="float64", context=context, eos_token_ids=[eos], num_threads=1, tail="hidden"
    )


def _requests(ad, texts=TEXTS, g=G):
    return [GenerationRequest(str(i), ad.encode(t), seed=i, max_new_tokens=g) for i, t in enumerate(texts)]


def _pipeline(ad, block):
    pipe = LLaDA2Pipeline(model=ReferenceModel(ad, block), scheduler=BlockRefinementScheduler(), tokenizer=ad.tokenizer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _reference(ad, block, prompts: list[list[int]], cfg: BlockRefinementConfig, eos: int) -> tuple[list, int]:
    """The pipeline's sequences (cut after the first EOS) for prompts of one length, and its forward count."""
    forwards = [0]

    def count(pipe, i, t, kwargs):
        forwards[0] += 1
        return kwargs

    seqs = _pipeline(ad, block)(
        input_ids=torch.tensor(prompts), use_chat_template=False, gen_length=G, block_length=block,
        num_inference_steps=cfg.steps_per_block, temperature=0.0, threshold=cfg.threshold,
        editing_threshold=cfg.editing_threshold, max_post_steps=cfg.max_post_steps, minimal_topk=cfg.minimal_topk,
        eos_token_id=eos, mask_token_id=ad.mask_id, output_type="seq", callback_on_step_end=count,
    ).sequences.tolist()  # fmt: skip
    return [s[: s.index(eos) + 1] if eos in s else s for s in seqs], forwards[0]


def _frequent_token(path) -> int:
    """The token the tiny model writes most: as EOS it makes rows stop early (the EOS path is exercised)."""
    ad = _adapter(path)
    out = MaskedDiffusionDecoder(ad, BlockRefinementConfig(steps_per_block=4)).generate(_requests(ad))
    return Counter(t for r in out for t in r.token_ids).most_common(1)[0][0]


CONFIGS = {
    "thr0.7": dict(threshold=0.7, steps_per_block=4),
    "thr0.95-edit0.5": dict(threshold=0.95, editing_threshold=0.5, steps_per_block=4),
    "thr0.5-edit0.3-post1": dict(threshold=0.5, editing_threshold=0.3, max_post_steps=1, steps_per_block=8),
    "steps3-edit0.6": dict(threshold=0.9, editing_threshold=0.6, steps_per_block=3),
}


def _grid_case(block, name, eos_kind, context):
    """The fast tier keeps one case of the grid (editing on, EOS frequent, the cache path); the rest are slow."""
    fast = (block, name, eos_kind, context) == (4, "thr0.95-edit0.5", "frequent", "cache")
    return pytest.param(block, name, eos_kind, context, marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(
    ("block", "name", "eos_kind", "context"),
    [
        _grid_case(b, n, e, c)
        for c in ("cache", "recompute")
        for e in ("rare", "frequent")
        for n in CONFIGS
        for b in (4, 8)
    ],
)
def test_greedy_equals_llada2_pipeline(checkpoints, block, name, eos_kind, context):
    """Ours at batch 8 (8 prompts of 2-34 tokens in one continuous batch) and batch 1 vs the pipeline, one prompt
    per call (its batches pad prompts to one length, which shifts positions and blocks)."""
    eos = 1 if eos_kind == "rare" else _frequent_token(checkpoints[block])
    ad = _adapter(checkpoints[block], context, eos)
    cfg = BlockRefinementConfig(**CONFIGS[name])
    reqs = _requests(ad)
    ours8 = MaskedDiffusionDecoder(ad, cfg).generate(reqs)
    ours1 = [r for q in reqs for r in MaskedDiffusionDecoder(ad, cfg).generate([q])]
    ref = [_reference(ad, block, [q.prompt_ids], cfg, eos) for q in reqs]
    for q, o8, o1, (seq, forwards) in zip(reqs, ours8, ours1, ref, strict=True):
        assert o8.token_ids == seq[0], (q.sample_id, o8.token_ids, seq[0])
        assert o1.token_ids == seq[0]
        assert o8.nfe <= forwards  # the pipeline's extra no-op forward per block (editing off)
        if cfg.editing:
            assert o8.nfe == forwards
    if eos_kind == "frequent":
        assert any(o.finished_by == "eos" and len(o.token_ids) < G for o in ours8)


@pytest.mark.parametrize("block", [4, 8])
def test_batch_of_eight_equals_pipeline_batch(checkpoints, block):
    """Eight prompts of one length in one pipeline call vs ours at batch 8 (editing off: the pipeline's block
    loop is batch-wide, so with editing on a row may be edited while others still fill)."""
    eos = _frequent_token(checkpoints[block])
    ad = _adapter(checkpoints[block], "cache", eos)
    texts = [t[:5].ljust(5, ".") for t in TEXTS]
    reqs = _requests(ad, texts)
    assert len({len(q.prompt_ids) for q in reqs}) == 1
    cfg = BlockRefinementConfig(threshold=0.8, steps_per_block=4)
    seqs, _ = _reference(ad, block, [q.prompt_ids for q in reqs], cfg, eos)
    assert [o.token_ids for o in MaskedDiffusionDecoder(ad, cfg).generate(reqs)] == seqs


@pytest.mark.parametrize(
    "cfg",
    [
        BlockRefinementConfig(threshold=0.8, editing_threshold=0.5, steps_per_block=4),
        LowConfidenceConfig(),
        FastDllmConfig(),
        ReMDMConfig(remask_ratio=0.3),
        BlockRefinementConfig(temperature=0.9, top_k=20, top_p=0.95, threshold=0.7),
    ],
    ids=["refine-edit", "low_confidence", "fast_dllm", "remdm", "sampled"],
)
def test_cache_equals_recompute_and_batching_changes_nothing(checkpoints, cfg):
    """Exact cache vs full recompute, and batch 8 vs 3 rows refilled as they finish vs batch 1: the same tokens
    (sampling included: every random number is keyed by sample, block, forward and position)."""
    cached, full = _adapter(checkpoints[4], "cache"), _adapter(checkpoints[4], "recompute")
    reqs = _requests(cached)
    a = [r.token_ids for r in MaskedDiffusionDecoder(cached, cfg).generate(reqs)]
    b = [r.token_ids for r in MaskedDiffusionDecoder(full, cfg).generate(reqs)]
    c = {r.sample_id: r.token_ids for r in MaskedDiffusionDecoder(cached, cfg).stream(reqs, batch_size=3)}
    d = [MaskedDiffusionDecoder(cached, cfg).generate([q])[0].token_ids for q in reqs]
    assert a == b == [c[q.sample_id] for q in reqs] == d
    assert sum(map(len, a)) >= 6 * G  # EOS is rare with this id: most rows run to their length


def test_tpf_counts_denoising_forwards(checkpoints):
    ad = _adapter(checkpoints[4])
    out = MaskedDiffusionDecoder(ad, FastDllmConfig(threshold=0.5)).generate(_requests(ad))
    for r in out:
        assert r.nfe == sum(r.steps_per_canvas) and r.tpf == len(r.token_ids) / r.nfe
        assert sum(map(sum, r.accepted_per_step)) >= len(r.token_ids)  # each output position was filled once
    assert sum(r.num_tokens for r in out) / sum(r.nfe for r in out) > 1.0  # the threshold fills several per step


def test_decoder_for_refuses_mixed_families(checkpoints):
    ad = _adapter(checkpoints[4])
    with pytest.raises(ValueError, match="uniform-state sampler on a masked model"):
        decoder_for(ad, EntropyBoundConfig())
    assert isinstance(decoder_for(ad, LowConfidenceConfig()), MaskedDiffusionDecoder)


@pytest.fixture(scope="module")
def bidirectional(tmp_path_factory):
    return build_masked(tmp_path_factory.mktemp("bidir") / "m", block_length=4, attention="bidirectional")


def test_bidirectional_recompute_equals_pipeline_and_prefix_cache_is_marked_approximate(bidirectional):
    """A fully bidirectional model: full recompute equals LLaDA2Pipeline token for token (greedy, editing on);
    the Fast-dLLM-style prefix cache runs, says it is approximate, and differs (its prefix K/V are never
    refreshed), which is why it is not the default."""
    kw = dict(dtype="float64", attention="bidirectional", eos_token_ids=[1], num_threads=1, tail="hidden")
    full = MaskedDiffusionAdapter(str(bidirectional), context="recompute", **kw)
    approx = MaskedDiffusionAdapter(str(bidirectional), context="prefix_cache", **kw)
    cfg = BlockRefinementConfig(threshold=0.8, editing_threshold=0.5, steps_per_block=4)
    reqs = _requests(full)
    ours = MaskedDiffusionDecoder(full, cfg).generate(reqs)
    for q, o in zip(reqs, ours, strict=True):
        assert o.token_ids == _reference(full, 4, [q.prompt_ids], cfg, 1)[0][0]
    assert approx.describe()["context_exact"] is False and full.describe()["context_exact"] is True
    approx_out = MaskedDiffusionDecoder(approx, cfg).generate(reqs)
    assert [o.token_ids for o in approx_out] != [o.token_ids for o in ours]
    with pytest.raises(ValueError, match="model.context=cache is exact only"):
        MaskedDiffusionAdapter(str(bidirectional), context="cache", **kw)


def test_shifted_logits_read_one_position_earlier(checkpoints):
    """Dream's convention: the logits for block position j are the model's at position start + j - 1."""
    from models.masked_diffusion import BlockQuery

    plain = _adapter(checkpoints[4], "recompute")
    shifted = MaskedDiffusionAdapter(
        str(checkpoints[4]), dtype="float64", context="recompute", shifted_logits=True, num_threads=1
    )
    ids = plain.encode("Hello world, this is")
    m = plain.mask_id
    q = [BlockQuery(0, ids[:8], ids[8:10] + [m, m], 100)]
    a, b = plain.forward(plain.open(1), q, 4), shifted.forward(shifted.open(1), q, 4)
    assert torch.equal(b[:, 1:], a[:, :-1])  # one forward, read one position earlier
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("context", ["recompute", "cache", "shifted"])
def test_the_lm_head_runs_on_the_read_columns_only(checkpoints, context):
    """`logits_to_keep`: the prompt's columns skip the LM head; each row's block logits stay its own sequence's,
    read alone at its block (one position earlier for Dream), for rows of different lengths and starts."""
    from models.masked_diffusion import BlockQuery

    shift = int(context == "shifted")
    kw = {"dtype": "float64", "context": "recompute" if shift else context, "num_threads": 1}
    ad = MaskedDiffusionAdapter(str(checkpoints[4]), shifted_logits=bool(shift), **kw)
    assert ad.trims_logits  # a transformers causal LM takes logits_to_keep
    m = ad.mask_id
    ids = [ad.encode(t) for t in ("Hello world, this is a longer one", "Hi there")]
    queries = [BlockQuery(0, ids[0][:12], ids[0][12:14] + [m, m], 100), BlockQuery(1, ids[1][:4], [m] * 4, 100)]
    got = ad.forward(ad.open(2), queries, 4)
    for q, row in zip(queries, got, strict=True):
        alone = ReferenceModel(ad, 4)(torch.tensor([q.prefix + q.block])).logits[0]
        torch.testing.assert_close(row, alone[q.start - shift : q.start + 4 - shift], rtol=0, atol=1e-10)


def test_eager_attention_reads_the_mask_as_sdpa_does(checkpoints):
    """The 4D mask is additive (0 / dtype min): an eager attention adds it to its scores as SDPA applies it. A boolean
    mask added to the scores hides nothing (logits off by ~2 here); the tolerance is eager's float32 softmax."""
    from models.masked_diffusion import BlockQuery

    sdpa, eager = (
        MaskedDiffusionAdapter(str(checkpoints[4]), dtype="float64", context="cache", attn_implementation=impl)
        for impl in ("sdpa", "eager")
    )
    m = sdpa.mask_id
    ids = sdpa.encode("Hello world, this is a longer one")
    queries = [BlockQuery(0, ids[:12], ids[12:14] + [m, m], 100), BlockQuery(1, ids[:4], [m] * 4, 6)]
    a, b = sdpa.forward(sdpa.open(2), queries, 4), eager.forward(eager.open(2), queries, 4)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-4)


@pytest.mark.parametrize("context", ["recompute", "cache"])
def test_rows_of_one_shape_share_one_mask_row_and_logits_stay(checkpoints, context, monkeypatch):
    """Rows at the same positions with the same end get one broadcast mask row; their logits equal those of a
    mask built row by row (bit for bit), and the shared row is taken only when the rows really agree."""
    import models.masked_diffusion as md

    ad = _adapter(checkpoints[4], context)
    m = ad.mask_id
    ids = [ad.encode(t) for t in ("Hello world, this is", "Once upon a time the")]
    assert len(ids[0]) == len(ids[1])
    same = [md.BlockQuery(i, s[:8], s[8:10] + [m, m], 100) for i, s in enumerate(ids)]
    assert md.mask_rows([12, 12], [[0, 1], [0, 1]]) == 1 and md.mask_rows([12, 11], [[0, 1], [0, 1]]) == 2
    assert md.mask_rows([12, 12], [[0, 1], [1, 2]]) == 2
    shared = ad.forward(ad.open(2), same, 4)
    monkeypatch.setattr(md, "mask_rows", lambda ends, positions=(): len(ends))
    assert torch.equal(shared, ad.forward(ad.open(2), same, 4))


def test_a_row_starting_its_prompt_runs_apart_from_the_decoding_rows(checkpoints):
    """A row refilled mid-run (its prompt not yet cached) runs in a forward of its own: in the decoding rows'
    forward it would pad every row to its prompt's length. Each row's logits stay those of its sequence alone."""
    from models.masked_diffusion import BlockQuery

    ad = _adapter(checkpoints[4])
    m = ad.mask_id
    ids = [ad.encode(t) for t in ("Hello world, this is a longer one", "Hi there, a prompt of some length")]
    cache = ad.open(2)
    ad.forward(cache, [BlockQuery(0, ids[0][:12], [m] * 4, 100)], 4)  # row 0's prompt cached
    queries = [BlockQuery(0, ids[0][:12], ids[0][12:14] + [m, m], 100), BlockQuery(1, ids[1][:24], [m] * 4, 100)]
    shapes = []
    hook = ad.model.register_forward_pre_hook(
        lambda mod, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        got = ad.forward(cache, queries, 4)
    finally:
        hook.remove()
    assert sorted(shapes) == [(1, 4), (1, 28)]  # not one (2, 28) forward
    for q, row in zip(queries, got, strict=True):
        alone = ReferenceModel(ad, 4)(torch.tensor([q.prefix + q.block])).logits[0]
        torch.testing.assert_close(row, alone[q.start : q.start + 4], rtol=0, atol=1e-10)


class _Remote(torch.nn.Module):
    """A stand-in for remote modeling code around the tiny twin: its forward's signature and mask handling are the
    subclass's; the network underneath is the same."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.generation_config = inner, inner.config, inner.generation_config

    @property
    def device(self):
        return self.inner.device

    @property
    def dtype(self):
        return self.inner.dtype


class _NoPositions(_Remote):
    """LLaDA 8B's forward: no position_ids and no **kwargs (positions are 0 .. T - 1, numbered by the model)."""

    def forward(self, input_ids=None, attention_mask=None, use_cache=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)


class _BoolMaskStoreKV(_Remote):
    """SDAR's forward: the mask read with `.bool()` (True = seen), the cache written only with `store_kv=True`."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                logits_to_keep=0, **kwargs):  # fmt: skip
        if past_key_values is not None and not kwargs.get("store_kv", False):
            raise AssertionError("store_kv not passed: SDAR would neither write nor read this cache")
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask.bool(), position_ids=position_ids,
            past_key_values=past_key_values, use_cache=use_cache, logits_to_keep=logits_to_keep,
        )  # fmt: skip


def _rebound(path, model_cls, context, **kw):
    ad = MaskedDiffusionAdapter(str(path), dtype="float64", context=context, eos_token_ids=[1], num_threads=1, **kw)
    ad.bind(model_cls(ad.model), ad.tokenizer, None, None, [1])
    return ad


def test_a_forward_without_position_ids_runs_the_recompute_path_and_refuses_the_cache(checkpoints):
    """LLaDA 8B's remote forward takes no position_ids: not passed (a TypeError otherwise), the model's own 0 .. T - 1
    are the recompute path's positions, so the tokens equal the plain twin's; a cached context is refused."""
    cfg = BlockRefinementConfig(threshold=0.8, steps_per_block=4)
    plain = _adapter(checkpoints[4], "recompute")
    bare = _rebound(checkpoints[4], _NoPositions, "recompute")
    assert not bare.takes_positions and plain.takes_positions and not bare.trims_logits
    reqs = _requests(plain)
    want = [r.token_ids for r in MaskedDiffusionDecoder(plain, cfg).generate(reqs)]
    assert [r.token_ids for r in MaskedDiffusionDecoder(bare, cfg).generate(reqs)] == want
    with pytest.raises(ValueError, match="position_ids"):
        _rebound(checkpoints[4], _NoPositions, "cache")


def test_a_bool_mask_and_forward_kwargs_reach_a_model_that_reads_them(checkpoints):
    """SDAR-style remote code: with `mask_form=bool` and `forward_kwargs={store_kv: true}` the cached decode equals
    the plain twin's; the additive form would be inverted by its `.bool()` (other logits)."""
    cfg = BlockRefinementConfig(threshold=0.8, steps_per_block=4)
    plain = _adapter(checkpoints[4], "cache")
    sdar = _rebound(checkpoints[4], _BoolMaskStoreKV, "cache", mask_form="bool", forward_kwargs={"store_kv": True})
    reqs = _requests(plain)
    want = [r.token_ids for r in MaskedDiffusionDecoder(plain, cfg).generate(reqs)]
    assert [r.token_ids for r in MaskedDiffusionDecoder(sdar, cfg).generate(reqs)] == want
    from models.masked_diffusion import BlockQuery

    q = [BlockQuery(0, reqs[4].prompt_ids[:8], [plain.mask_id] * 4, 100)]
    inverted = _rebound(checkpoints[4], _BoolMaskStoreKV, "cache", forward_kwargs={"store_kv": True})
    got, ref = inverted.forward(inverted.open(1), q, 4), plain.forward(plain.open(1), q, 4)
    assert not torch.allclose(got, ref, atol=1e-3)
    with pytest.raises(AssertionError, match="store_kv"):
        _rebound(checkpoints[4], _BoolMaskStoreKV, "cache", mask_form="bool").forward(plain.open(1), q, 4)
