"""The AR engine (harness.engine.ar) on per-row KV slots (models.cache.slot_cache): AR, AR + draft and AR + MTP.

References: transformers' `generate()` (greedy AR tokens) and assisted generation (accepted tokens per verify
step at batch 1, with the same drafter and k). Batched speculative decoding must be lossless at batch 1, 8 and
32, and a sample's tokens must not depend on its batch (greedy and sampled)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bench.cpu.forward_counter import StepStreamer
from contract.records import GenerationRequest
from harness.engine.ar import AREngine
from models.cache.slot_cache import SlotCache
from models.causal_lm import CausalLM
from models.drafters import ModelDrafter, MTPDrafter
from samplers.token_draw import TokenSampling

TARGET, DRAFT = "models/checkpoints/sudoku6_ar", "models/checkpoints/sudoku6_ar_draft"
GREEDY = TokenSampling()


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(TARGET).eval()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TARGET)


@pytest.fixture(scope="module")
def sudoku_requests(tokenizer):
    """32 real 6x6 Sudoku prompts of the shipped eval, with answers of different lengths."""
    from evals.sudoku.eval import SudokuEval

    ev = SudokuEval(size=6, num_puzzles=32, seed=5)
    items = ev.items()
    from contract.text import encode_prompt

    out = []
    for i, it in enumerate(items):
        out.append(GenerationRequest(it.sample_id, encode_prompt(tokenizer, it.prompt, None), i, 10 + (7 * i) % 40))
    return out


@pytest.fixture(scope="module")
def mtp_drafter(target, tmp_path_factory):
    """A tiny `gemma4_assistant` wired to pass the target's hidden state through (so it agrees with the target
    on part of the tokens: a random drafter would never be accepted and prove nothing)."""
    from models.gemma4_mtp import build_tiny_assistant, load_assistant

    a = load_assistant(str(build_tiny_assistant(tmp_path_factory.mktemp("mtp"), TARGET, layers=1))).eval()
    h = target.config.hidden_size
    with torch.no_grad():
        a.pre_projection.weight.zero_()
        a.pre_projection.weight[:, h:].copy_(torch.eye(h))
        for mod in a.model.modules():
            for name in ("o_proj", "down_proj"):
                if hasattr(mod, name):
                    getattr(mod, name).weight.zero_()
        a.post_projection.weight.copy_(torch.eye(h))
        a.lm_head.weight.copy_(target.lm_head.weight)
    return a


def greedy_reference(model, req):
    out = model.generate(
        torch.tensor([req.prompt_ids]), max_new_tokens=req.max_new_tokens, do_sample=False, eos_token_id=[1]
    )[0, len(req.prompt_ids) :].tolist()
    return out[: out.index(1) + 1] if 1 in out else out


def assisted_steps(model, drafter, req, k):
    drafter.generation_config.num_assistant_tokens = k
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    drafter.generation_config.assistant_confidence_threshold = 0.0
    streamer = StepStreamer()
    model.generate(
        torch.tensor([req.prompt_ids]),
        max_new_tokens=req.max_new_tokens,
        do_sample=False,
        eos_token_id=[1],
        assistant_model=drafter,
        streamer=streamer,
    )
    return streamer.tokens_per_step


def decode(engine, reqs, batch_size):
    return {r.sample_id: r for r in engine.stream(reqs, batch_size)}


# --- the slot cache ----------------------------------------------------------------------------------------------


def test_slot_positions_ring_and_rollback():
    class Cfg:
        layer_types = ["sliding_attention", "full_attention"]
        sliding_window = 4

    c = SlotCache(Cfg(), rows=2, capacity=8, max_chunk=3, dtype=torch.float32, device="cpu")
    assert c.ring == 6
    c.begin(None, [0, 0], 3)  # both rows write positions 0..2
    c.begin([1], [3], 3)  # row 1 alone: 3..5
    c.begin([1], [6], 3)  # row 1: 6..8 (past the ring: slots 0..2 now hold 6..8)
    assert c.key_positions("sliding_attention", [0, 1], 6).tolist() == [[0, 1, 2, -1, -1, -1], [6, 7, 8, 3, 4, 5]]
    assert c.key_positions("full_attention", [0, 1], 9)[1].tolist() == list(range(9))  # grew past capacity 8
    c.begin([1], [7], 1)  # rollback: position 7 rewritten; nothing moves, 8 stays stale (masked: after the query)
    m = c.masks(torch.tensor([[7]]), torch.float32)
    seen = (m["sliding_attention"][0, 0, 0] == 0).tolist()
    assert seen == [True, True, False, False, True, True]  # slots of 6, 7 | 8 (stale), 3 (window) | 4, 5
    c.reset([1])
    assert c.key_positions("full_attention", [1], 4).tolist() == [[-1, -1, -1, -1]]


def test_rollback_moves_no_kv(target, tokenizer, sudoku_requests):
    """Ragged acceptance over 32 rows: every byte the target's cache wrote is new K/V; nothing is copied."""
    draft = CausalLM(AutoModelForCausalLM.from_pretrained(DRAFT).eval())
    eng = AREngine(CausalLM(target), tokenizer, [1], GREEDY, ModelDrafter(draft, 4, GREEDY), 4)
    decode(eng, sudoku_requests, 32)
    assert eng.stats["kv_bytes_moved"] == 0 and eng.stats["kv_bytes_written"] > 0


# --- AR --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ar_equals_generate_at_every_batch_size(target, tokenizer, sudoku_requests):
    reqs = sudoku_requests[:12]
    ref = {r.sample_id: greedy_reference(target, r) for r in reqs}
    eng = AREngine(CausalLM(target), tokenizer, [1], GREEDY)
    for b in (1, 5, 12):
        out = decode(eng, reqs, b)
        assert {k: v.token_ids for k, v in out.items()} == ref, b
        assert all(v.nfe == len(v.token_ids) for v in out.values())  # one target forward per token (TPF 1)


@pytest.mark.slow
def test_sampled_ar_does_not_depend_on_the_batch(target, tokenizer, sudoku_requests):
    reqs = sudoku_requests[:10]
    eng = AREngine(CausalLM(target), tokenizer, [1], TokenSampling(True, 1.3, 20, 0.95))
    alone = decode(eng, reqs, 1)
    together = decode(eng, reqs, 4)
    assert {k: v.token_ids for k, v in alone.items()} == {k: v.token_ids for k, v in together.items()}
    assert any(v.token_ids != greedy_reference(target, r) for r, v in zip(reqs, alone.values()))  # it does sample


# --- AR + draft / AR + MTP -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["draft", "mtp"])
def test_batched_speculative_is_lossless_and_matches_assisted_generation(
    kind, target, tokenizer, sudoku_requests, mtp_drafter
):
    from models.gemma4_mtp import export_shared_kv

    k = 3
    if kind == "draft":
        hf_drafter = AutoModelForCausalLM.from_pretrained(DRAFT).eval()
        drafter = ModelDrafter(CausalLM(hf_drafter), k, GREEDY)
    else:
        hf_drafter = mtp_drafter
        drafter = MTPDrafter(mtp_drafter, CausalLM(target), export_shared_kv(target), k)
    eng = AREngine(CausalLM(target), tokenizer, [1], GREEDY, drafter, k)
    reqs = sudoku_requests
    ref = {r.sample_id: greedy_reference(target, r) for r in reqs}
    steps = {r.sample_id: assisted_steps(target, hf_drafter, r, k) for r in reqs}
    assert any(n > 1 for per in steps.values() for n in per)  # drafts accepted: not the trivial all-ones case
    for b in (1, 8, 32):
        out = decode(eng, reqs, b)
        assert {s: v.token_ids for s, v in out.items()} == ref, b  # lossless: greedy AR's tokens
        assert {s: out[s].extra["tokens_per_verify"] for s in steps} == steps, b  # assisted generation's counts
        tpf = sum(len(v.token_ids) for v in out.values()) / sum(v.nfe for v in out.values())
        assert tpf > (1.5 if kind == "draft" else 1.0), tpf


@pytest.mark.slow
def test_sampled_speculative_is_batch_invariant_and_seeded(target, tokenizer, sudoku_requests):
    sampling = TokenSampling(True, 1.0, 0, 1.0)
    draft = CausalLM(AutoModelForCausalLM.from_pretrained(DRAFT).eval())
    eng = AREngine(CausalLM(target), tokenizer, [1], sampling, ModelDrafter(draft, 4, sampling), 4)
    reqs = sudoku_requests[:12]
    alone, together = decode(eng, reqs, 1), decode(eng, reqs, 6)
    assert {s: v.token_ids for s, v in alone.items()} == {s: v.token_ids for s, v in together.items()}
    assert sum(len(v.token_ids) for v in alone.values()) > sum(v.nfe for v in alone.values())  # drafts kept
