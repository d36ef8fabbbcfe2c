"""Self-speculative and routed decoding (harness/engine/canvas_verify.py): one set of weights, diffusion drafts, the AR
mode
verifies. Greedy verification must give the AR mode's tokens exactly, at any batch size; a routing rule that never
fires must leave pure diffusion untouched; a rejected draft's K/V is dropped without touching other rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contract.records import GenerationRequest, decode_metrics
from harness import api
from harness.engine.decode import BlockDiffusionDecoder
from harness.engine.decoders import decoder_for
from models.diffusion_gemma_ar import DiffusionGemmaARDecoder
from samplers.config import EntropyBoundConfig, SamplerConfigError
from tests.helpers.app import REPO, compose_app, run_app

PROMPTS = ["hi", "a longer prompt here", "mid size", "another one", "x y z w"]
DUAL = REPO / "models/checkpoints/sudoku6_dual"


def _requests(encode, prompts, lengths):
    return [
        GenerationRequest(f"s{i}", encode(p), seed=i, max_new_tokens=n)
        for i, (p, n) in enumerate(zip(prompts, lengths))
    ]


def _tokens(results):
    return {r.sample_id: r.token_ids for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("verify", ["always", "steps", "step_cap"])
def test_greedy_verification_is_the_ar_modes_output_at_batch_1_and_16(medium_diffusion_dir, adapter_factory, verify):
    ar = decoder_for(DiffusionGemmaARDecoder(path=str(medium_diffusion_dir), dtype="float32", eos_token_ids=[1]), None)
    reqs = _requests(ar.encode, PROMPTS * 4, [6 + i for i in range(20)])
    expected = _tokens(ar.generate(reqs))
    draft_steps = 2 if verify == "always" else None  # a short draft: the random model's drafts are rejected anyway
    cfg = EntropyBoundConfig(verify=verify, max_steps=8, draft_steps=draft_steps)
    dec = BlockDiffusionDecoder(adapter_factory(medium_diffusion_dir), cfg)
    for batch in (1, 16):
        out = list(dec.stream(reqs, batch))
        if verify == "always":  # every canvas verified: exactly the AR mode's tokens
            assert _tokens(out) == expected, batch
        for r in out:  # NFE = denoiser forwards + verify forwards, one TPF rule
            verifies = len(r.extra.get("accepted_per_verify", []))
            assert r.nfe == sum(r.steps_per_canvas) + verifies
            if verify == "always":
                assert verifies == len(r.steps_per_canvas)
    assert dec.label == ("self-speculative" if verify == "always" else "routed")


def test_a_rule_that_never_fires_is_pure_diffusion(medium_diffusion_dir, adapter_factory):
    a = adapter_factory(medium_diffusion_dir)
    reqs = _requests(a.encode, PROMPTS, [17, 9, 24, 12, 30])
    plain = list(BlockDiffusionDecoder(a, EntropyBoundConfig(max_steps=8)).stream(reqs, 3))
    never = list(
        BlockDiffusionDecoder(a, EntropyBoundConfig(max_steps=8, verify="steps", route_steps=99)).stream(reqs, 3)
    )
    assert _tokens(never) == _tokens(plain)
    assert [r.nfe for r in never] == [r.nfe for r in plain]
    assert all("accepted_per_verify" not in r.extra for r in never)


@pytest.mark.slow
def test_sampled_verification_is_batch_invariant_and_counts_its_forwards(medium_diffusion_dir, adapter_factory):
    a = adapter_factory(medium_diffusion_dir)
    reqs = _requests(a.encode, PROMPTS, [17, 9, 24, 12, 30])
    cfg = EntropyBoundConfig(max_steps=8, verify="always", draft_steps=2, verify_temperature=1.0)
    dec = BlockDiffusionDecoder(a, cfg)
    alone = [next(iter(dec.stream([r], 1))) for r in reqs]
    together = list(dec.stream(reqs, 4))
    assert _tokens(together) == _tokens(alone)  # random numbers keyed by (seed, position, stream)
    greedy = list(
        BlockDiffusionDecoder(a, EntropyBoundConfig(max_steps=8, verify="always", draft_steps=2)).stream(reqs, 4)
    )
    assert _tokens(together) != _tokens(greedy)  # the temperature is used
    m = decode_metrics([r.to_dict() for r in together])
    assert m["verify_forwards"] == sum(len(r.steps_per_canvas) for r in together) and m["verified_canvas_share"] == 1.0
    assert max(sum(r.steps_per_canvas) for r in together) <= 2 * max(len(r.steps_per_canvas) for r in together)


def test_rejected_positions_are_dropped_without_touching_other_rows(medium_diffusion_dir, adapter_factory):
    """A verification keeps a prefix of row 1's canvas: the other rows' K/V stay bit for bit, and row 1 then
    continues exactly as if only the kept tokens had ever been encoded."""
    a = adapter_factory(medium_diffusion_dir)
    prompts = [a.encode(p) for p in PROMPTS[:3]]
    state = a.prefill(prompts, a.open(3, 8), grow=16)
    before = [(k.clone(), v.clone()) for k, v in zip(state.cache.keys, state.cache.values, strict=True)]
    canvas = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    hidden = a.encode_canvas(state, canvas, [1])
    a.advance(state, [1], [3], hidden)
    assert state.lengths == [len(prompts[0]), len(prompts[1]) + 3, len(prompts[2])]
    for (k0, v0), k1, v1 in zip(before, state.cache.keys, state.cache.values, strict=True):
        for row in (0, 2):
            assert torch.equal(k0[row], k1[row]) and torch.equal(v0[row], v1[row])
    fresh = a.prefill([prompts[1] + [5, 6, 7]], a.open(1, 8))
    torch.testing.assert_close(a.next_token_logits(state, [1]), a.next_token_logits(fresh, [0]), rtol=1e-5, atol=1e-5)


def test_bad_verification_knobs_fail_before_any_model_loads():
    for bad in ({"verify": "sometimes"}, {"draft_steps": 0}, {"route_steps": 0}, {"verify_temperature": -1.0}):
        with pytest.raises(SamplerConfigError, match=next(iter(bad))):
            EntropyBoundConfig(**bad)
    with pytest.raises(SamplerConfigError, match="random_stream=per_sample"):
        EntropyBoundConfig(verify="always", random_stream="reference")
    cfg = compose_app("model=sudoku6_dual", "+decode=ar_mode")
    assert cfg.model._target_.endswith("DiffusionGemmaARDecoder") and cfg.model.path.endswith("sudoku6_dual")


@pytest.mark.slow
def test_dual_checkpoint_self_speculation_accepts_drafts_and_stays_lossless():
    """On the shipped dual-mode checkpoint the AR mode accepts diffusion's drafts (TPF above AR's 1.0 with one-step
    drafts) and the output is the AR mode's, token for token, at batch 1 and 16."""
    cfg = compose_app("model=sudoku6_dual", "eval=sudoku6", "eval.num_puzzles=16")
    from hydra.utils import instantiate

    items = instantiate(cfg.eval).items()
    ar = api.decoder_from_config(["model=sudoku6_dual", "+decode=ar_mode"])
    spec = api.decoder_from_config(["model=sudoku6_dual", "+decode=self_speculative"])
    reqs = [GenerationRequest(it.sample_id, ar.encode(it.prompt), seed=0, max_new_tokens=64) for it in items]
    expected = _tokens(ar.generate(reqs))
    for batch in (1, 16):
        out = list(spec.stream(reqs, batch))
        assert _tokens(out) == expected, batch
        m = decode_metrics([r.to_dict() for r in out])
        assert m["tpf"] > 1.0 and m["mean_accepted_per_verify"] > 0.5, m


@pytest.mark.slow
def test_sudoku_hybrid_summary_sets_every_way_beside_the_pure_modes(tmp_path):
    proc = run_app(
        "experiment=sudoku_hybrid", "eval.num_puzzles=12", "batch_size=12", f"hydra.sweep.dir={tmp_path}", timeout=900
    )
    labels = {json.loads(p.read_text())["run"]["label"] for p in Path(tmp_path).glob("*/metrics.json")}
    assert labels == {"diffusion", "ar-same-weights", "self-speculative", "routed"}
    assert "Hybrid decoding vs the pure modes" in proc.stdout
    assert "routed (steps)" in proc.stdout and "routed (step_cap)" in proc.stdout
    assert proc.stdout.count("100.0% of samples decode exactly the AR mode's tokens") == 2
    assert list((tmp_path / "summary").glob("pareto_*.png"))


@pytest.mark.slow
@pytest.mark.parametrize("verify,route_steps", [("always", 8), ("steps", 4), ("steps", 5)])  # 4, 5: mixed canvases
def test_the_context_holds_exactly_the_emitted_tokens(medium_diffusion_dir, adapter_factory, verify, route_steps):
    """Whatever mix of verified and drafted canvases a row goes through, what its cache holds after the prompt is
    the start of its output: a pinned token is emitted once, a rejected draft never enters the context."""
    a = adapter_factory(medium_diffusion_dir)
    context: list[int] = []
    pending = {}
    encode_canvas, advance = a.encode_canvas, a.advance  # `commit` runs through both as well

    def on_encode(state, canvas, rows):
        pending["canvas"] = canvas
        return encode_canvas(state, canvas, rows)

    def on_advance(state, rows, counts, hidden):
        context.extend(pending["canvas"][0, : counts[0]].tolist())
        return advance(state, rows, counts, hidden)

    a.encode_canvas, a.advance = on_encode, on_advance
    try:
        dec = BlockDiffusionDecoder(a, EntropyBoundConfig(max_steps=8, verify=verify, route_steps=route_steps))
        for req in _requests(a.encode, PROMPTS, [40, 33, 27, 45, 38]):
            context.clear()
            [res] = list(dec.stream([req], 1))
            n = min(len(context), len(res.token_ids))
            assert n > 0 and res.token_ids[:n] == context[:n]
    finally:
        a.encode_canvas, a.advance = encode_canvas, advance
