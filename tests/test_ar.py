"""AR baselines (models.ar) on tiny local Gemma 4 checkpoints: outputs vs `transformers.generate`, NFE vs hand
counts."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma4ForCausalLM

from contract.decoding import Decoder
from contract.records import GenerationRequest
from contract.text import cut_at_stop
from harness.engine.decoders import decoder_for
from samplers.token_rule import TokenRuleConfig

N = 16  # max new tokens in most tests
PROMPTS = ["hello world", "The answer is", "12+7=", "a"]


@pytest.fixture(scope="session")
def ar_dir(tmp_path_factory):
    from models.tiny import build_ar

    return build_ar(tmp_path_factory.mktemp("tiny_ar"), seed=0)


@pytest.fixture(scope="session")
def near_draft_dir(ar_dir, tmp_path_factory):
    """The target with its last MLP perturbed: agrees with the target on some tokens, not all."""
    model = AutoModelForCausalLM.from_pretrained(ar_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        w = model.model.layers[-1].mlp.down_proj.weight
        w.add_(torch.randn_like(w) * w.std() * 3)
    out = tmp_path_factory.mktemp("near_draft")
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def mtp_dir(ar_dir, tmp_path_factory):
    from models.gemma4_mtp import build_tiny_assistant

    return build_tiny_assistant(tmp_path_factory.mktemp("tiny_mtp"), ar_dir, layers=1)


@pytest.fixture(scope="session")
def multimodal_ar_dir(tmp_path_factory):
    """A tiny `Gemma4ForConditionalGeneration`: the class the released gemma-4-26B-A4B-it loads as."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    from models.tiny import TINY_VISION, ar_config, char_tokenizer, vocab_size_for

    tok = char_tokenizer()
    v = vocab_size_for(tok)
    config = Gemma4Config(
        text_config=ar_config(v).to_dict(),
        vision_config=dict(TINY_VISION),
        audio_config=None,
        boi_token_id=v - 3,
        eoi_token_id=v - 2,
        image_token_id=v - 1,
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_multimodal_ar")
    Gemma4ForConditionalGeneration(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def ar(ar_dir):
    from models.ar import ARDecoder

    return decoder_for(ARDecoder(str(ar_dir), name="tiny_ar", dtype="float32", device="cpu"), None)


def requests(dec, prompts=PROMPTS, n=N, stops=(), seed=0):
    return [GenerationRequest(f"s{i}", dec.encode(p), seed + i, n, list(stops)) for i, p in enumerate(prompts)]


def hf_greedy(dec, prompts, n, eos):
    """Reference: plain `generate` on a batch the tokenizer itself left-pads; returns new tokens per row."""
    tok = dec.tokenizer
    enc = tok(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    assert tok.padding_side == "left"
    out = dec.model.model.generate(
        **enc, max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=tok.pad_token_id
    )
    return out[:, enc["input_ids"].shape[1] :].tolist()


def first_cut(tokens, eos):
    """Hand cut: up to and including the first EOS; also the number of forwards the row paid."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


# --- plain AR -----------------------------------------------------------------------------------


def test_is_a_decoder(ar):
    assert isinstance(ar, Decoder) and ar.label == "ar"
    info = ar.describe()
    assert info["batched"] is True and info["do_sample"] is False and info["model_class"] == "Gemma4ForCausalLM"


def test_greedy_batch1_equals_generate(ar):
    for p in PROMPTS:
        [res] = ar.generate(requests(ar, [p]))
        ref = first_cut(hf_greedy(ar, [p], N, ar.model.eos_ids)[0], ar.model.eos_ids)
        assert res.token_ids == ref, p
        assert res.nfe == len(ref)  # one forward per token, prefill included
        assert res.tpf == pytest.approx(1.0)


def test_greedy_left_padded_batch_equals_generate_and_batch1(ar):
    batch = ar.generate(requests(ar))
    ref = hf_greedy(ar, PROMPTS, N, ar.model.eos_ids)
    singles = [ar.generate(requests(ar, [p]))[0] for p in PROMPTS]
    for res, row, single in zip(batch, ref, singles):
        assert res.token_ids == first_cut(row, ar.model.eos_ids)
        assert res.token_ids == single.token_ids and res.nfe == single.nfe


def test_finished_rows_stop_paying(ar_dir, ar):
    """Make a token the EOS that rows emit at different steps: each row pays only up to its own EOS."""
    from models.ar import ARDecoder

    free = hf_greedy(ar, PROMPTS, N, eos=[])  # no EOS at all: full rows
    stop_tok = free[0][3]
    hand = [row.index(stop_tok) + 1 if stop_tok in row else N for row in free]
    assert len(set(hand)) > 1, "pick prompts whose rows finish at different steps"
    dec = decoder_for(ARDecoder(str(ar_dir), dtype="float32", device="cpu", eos_token_ids=[stop_tok]), None)
    res = dec.generate(requests(dec))
    assert [r.nfe for r in res] == hand
    assert [r.token_ids for r in res] == [row[:h] for row, h in zip(free, hand)]
    assert [r.finished_by for r in res] == ["eos" if stop_tok in row else "length" for row in free]
    # the continuous engine computes rows 0..(highest row in flight): finished rows leave, idle ones are waste
    assert sum(r.nfe for r in res) / sum(r.row_forwards for r in res) == dec.engine.stats["row_utilization"]
    assert sum(r.row_forwards for r in res) <= len(res) * max(hand)
    ref = hf_greedy(dec, PROMPTS, N, eos=[stop_tok])
    assert [r.token_ids for r in res] == [first_cut(row, [stop_tok]) for row in ref]


def test_stop_strings_cut_like_cut_at_stop_and_stop_early(ar):
    full = ar.generate(requests(ar, [PROMPTS[0]], n=24))[0]
    text = full.text
    stop = text[6:8]  # a stop string the model does produce, mid-output
    assert stop and len(stop) == 2
    [res] = ar.generate(requests(ar, [PROMPTS[0]], n=24, stops=[stop]))
    ids, cut_text, reason = cut_at_stop(ar.tokenizer, full.token_ids, set(ar.model.eos_ids), [stop])
    assert (
        (res.token_ids, res.text, res.finished_by) == (ids, cut_text, reason) == (ids, text[: text.find(stop)], "stop")
    )
    # decoding stopped at the token that completed the stop string (char tokenizer: one char per token)
    hand = next(n for n in range(1, 25) if stop in ar.tokenizer.decode(full.token_ids[:n]))
    assert res.nfe == hand < full.nfe


def test_mixed_max_new_tokens_in_one_batch(ar):
    reqs = requests(ar, PROMPTS[:2])
    reqs[1].max_new_tokens = 5
    res = ar.generate(reqs)
    assert [r.sample_id for r in res] == ["s0", "s1"]
    assert res[1].nfe == len(res[1].token_ids) <= 5
    assert res[1].token_ids == ar.generate(requests(ar, PROMPTS[:2]))[1].token_ids[:5]


def test_sampling_is_seeded(ar_dir):
    from models.ar import ARDecoder

    ad = ARDecoder(str(ar_dir), dtype="float32", device="cpu")
    dec = decoder_for(ad, TokenRuleConfig(do_sample=True, temperature=1.5, top_p=0.95))  # the token rule: a sampler
    assert dec.describe()["temperature"] == 1.5
    a = dec.generate(requests(dec, [PROMPTS[0]], seed=7))[0].token_ids
    b = dec.generate(requests(dec, [PROMPTS[0]], seed=7))[0].token_ids
    c = dec.generate(requests(dec, [PROMPTS[0]], seed=8))[0].token_ids
    assert a == b and a != c
    state = torch.random.get_rng_state()
    dec.generate(requests(dec, [PROMPTS[0]], seed=7))
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's RNG is left alone


# --- AR + draft (speculative decoding) ---------------------------------------------------------


def assisted(target, draft, rule: TokenRuleConfig | None = None, **kw):
    from models.ar import AssistedARDecoder

    return decoder_for(AssistedARDecoder(str(target), draft_path=str(draft), dtype="float32", device="cpu", **kw), rule)


def test_draft_equal_to_target_accepts_everything(ar_dir, ar):
    k = 4
    dec = assisted(ar_dir, ar_dir, num_draft_tokens=k)
    assert dec.label == "ar+draft" and dec.model.draft is not dec.model.model
    assert dec.describe()["batched"] is True
    greedy = ar.generate(requests(ar, n=20))
    for res, ref in zip(dec.generate(requests(dec, n=20)), greedy):
        assert res.token_ids == ref.token_ids
        generated = res.extra["generated_before_cut"]
        assert res.nfe == math.ceil(generated / (k + 1))  # every draft accepted + 1 bonus token per verify
        assert res.extra["tokens_per_verify"][:-1] == [k + 1] * (res.nfe - 1)
        assert res.extra["draft_forwards"] >= k * (res.nfe - 1)
        if generated == 20:
            assert res.tpf > k  # 20 tokens / 4 verifies = 5.0


def reference_speculative(target, draft, prompt, n, k, eos):
    """Hand-rolled greedy speculative decoding (full recompute, no cache): tokens and tokens per verify step."""
    seq, per_step = list(prompt), []
    with torch.no_grad():
        while len(seq) - len(prompt) < n:
            cand = list(seq)
            for _ in range(min(k, n - (len(seq) - len(prompt)) - 1)):
                cand.append(int(draft(torch.tensor([cand])).logits[0, -1].argmax()))
                if cand[-1] in eos:
                    break
            c = len(cand) - len(seq)
            picks = target(torch.tensor([cand])).logits[0, len(seq) - 1 :].argmax(-1).tolist()  # one target forward
            m = 0
            while m < c and cand[len(seq) + m] == picks[m]:
                m += 1
            new = picks[: m + 1]
            hit = [i for i, t in enumerate(new) if t in eos]
            new = new[: hit[0] + 1] if hit else new
            seq += new
            per_step.append(len(new))
            if hit:
                break
    return seq[len(prompt) :], per_step


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_partial_agreement_matches_hand_count(ar_dir, near_draft_dir, ar, k):
    dec = assisted(ar_dir, near_draft_dir, num_draft_tokens=k)
    draft = AutoModelForCausalLM.from_pretrained(near_draft_dir).eval()
    accepted = 0
    for req in requests(dec, n=20):
        [res] = dec.generate([req])
        tokens, per_step = reference_speculative(dec.model.model, draft, req.prompt_ids, 20, k, dec.model.eos_ids)
        assert res.extra["tokens_per_verify"] == per_step
        assert res.nfe == len(per_step) and res.token_ids == first_cut(tokens, dec.model.eos_ids)
        assert res.token_ids == ar.generate([req])[0].token_ids  # lossless: the target's greedy output
        accepted += res.extra["accepted_drafts"]
    assert accepted > 0, "the perturbed draft should agree sometimes"


def test_heuristic_schedule_restarts_per_sample(ar_dir):
    dec = assisted(ar_dir, ar_dir, num_draft_tokens=2, num_draft_tokens_schedule="heuristic")
    req = requests(dec, [PROMPTS[0]], n=20)
    first, second = dec.generate(req)[0], dec.generate(req)[0]
    assert first.extra["tokens_per_verify"] == second.extra["tokens_per_verify"]
    assert first.extra["tokens_per_verify"][:2] == [3, 5]  # all accepted: 2 drafts, then 4


def test_assisted_stop_string_and_sampling(ar_dir, near_draft_dir, ar):
    full = ar.generate(requests(ar, [PROMPTS[0]], n=24))[0]
    stop = full.text[6:8]
    dec = assisted(ar_dir, near_draft_dir, num_draft_tokens=3)
    [res] = dec.generate(requests(dec, [PROMPTS[0]], n=24, stops=[stop]))
    assert (res.token_ids, res.text, res.finished_by) == cut_at_stop(
        ar.tokenizer, full.token_ids, set(ar.model.eos_ids), [stop]
    )
    assert res.nfe < full.nfe
    samp = assisted(ar_dir, near_draft_dir, TokenRuleConfig(do_sample=True, temperature=1.0), num_draft_tokens=3)
    a = samp.generate(requests(samp, [PROMPTS[1]], seed=3))[0]
    b = samp.generate(requests(samp, [PROMPTS[1]], seed=3))[0]
    assert a.token_ids == b.token_ids and a.nfe == b.nfe


# --- AR + MTP (Gemma 4 assistant drafter) -------------------------------------------------------


def test_mtp_drafter_is_lossless_and_counted(ar_dir, mtp_dir, ar):
    dec = assisted(ar_dir, mtp_dir, num_draft_tokens=3)
    assert dec.label == "ar+mtp" and type(dec.model.draft).__name__ == "Gemma4AssistantForCausalLM"
    assert dec.describe()["kv_store_layers"] == [0, 1]  # the target hands over its last K/V of each layer type
    for res, ref in zip(dec.generate(requests(dec, n=20)), ar.generate(requests(ar, n=20))):
        assert res.token_ids == ref.token_ids
        steps = res.extra["tokens_per_verify"]
        assert steps[0] == 1  # the MTP drafter needs the target's prefill before it can draft
        assert res.nfe == len(steps) and sum(steps) == res.extra["generated_before_cut"]
        assert all(1 <= s <= 4 for s in steps)
        assert res.extra["draft_forwards"] == sum(min(3, 20 - sum(steps[:i]) - 1) for i in range(1, len(steps)))


def test_transformers_defects_worked_around_still_exist(ar_dir, mtp_dir):
    """Canary: if transformers fixes either defect (see models.gemma4_mtp), this fails and the workaround can go."""
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    with pytest.raises(ValueError, match="layer types producing a cache"):
        Gemma4AssistantForCausalLM(Gemma4AssistantConfig.from_pretrained(mtp_dir))
    target = AutoModelForCausalLM.from_pretrained(ar_dir).eval()
    with torch.no_grad():
        out = target(torch.tensor([[10, 11, 12]]), return_shared_kv_states=True)
    assert len(out.shared_kv_states) == 0  # a target without KV sharing hands the drafter nothing


def test_mtp_with_the_multimodal_target_class(multimodal_ar_dir, tmp_path):
    from models.ar import ARDecoder
    from models.gemma4_mtp import build_tiny_assistant

    drafter = build_tiny_assistant(tmp_path / "mtp", multimodal_ar_dir, layers=2)
    dec = assisted(multimodal_ar_dir, drafter, num_draft_tokens=2)
    assert type(dec.model.model).__name__ == "Gemma4ForConditionalGeneration" and dec.label == "ar+mtp"
    ar_mm = decoder_for(ARDecoder(str(multimodal_ar_dir), dtype="float32", device="cpu"), None)
    for res, ref in zip(dec.generate(requests(dec, PROMPTS[:2])), ar_mm.generate(requests(ar_mm, PROMPTS[:2]))):
        assert res.token_ids == ref.token_ids and res.nfe == len(res.extra["tokens_per_verify"])


def test_mtp_rejects_heuristic_schedule_before_loading(ar_dir, mtp_dir):
    with pytest.raises(ValueError, match="constant"):
        assisted(ar_dir, mtp_dir, num_draft_tokens_schedule="heuristic")


# --- bad input fails before any model loads ------------------------------------------------------


def test_bad_input_fails_fast(ar_dir, tmp_path, ar):
    from models.ar import ARDecoder
    from models.tiny import ar_config

    with pytest.raises(ValueError, match="dtype"):
        ARDecoder(str(ar_dir), dtype="fp8")
    with pytest.raises(FileNotFoundError):
        ARDecoder(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        ARDecoder("models/checkpoints/not_there")
    with pytest.raises(ValueError, match="schedule"):
        assisted(ar_dir, ar_dir, num_draft_tokens_schedule="linear")
    with pytest.raises(ValueError, match="num_draft_tokens"):
        assisted(ar_dir, ar_dir, num_draft_tokens=0)
    Gemma4ForCausalLM(ar_config(64)).save_pretrained(tmp_path / "small_vocab")
    with pytest.raises(ValueError, match="vocabulary"):
        assisted(ar_dir, tmp_path / "small_vocab")
    with pytest.raises(ValueError, match="max_new_tokens"):
        ar.generate(requests(ar, [PROMPTS[0]], n=0))
    with pytest.raises(ValueError, match="empty prompt"):
        ar.generate([GenerationRequest("x", [], 0, 4)])


def test_model_configs_instantiate(ar_dir, mtp_dir):
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[1] / "conf" / "model"
    for name in ("tiny_ar", "tiny_ar_draft", "gemma4_ar", "gemma4_ar_mtp"):
        cfg = OmegaConf.load(conf / f"{name}.yaml")
        assert cfg.name and cfg._target_.startswith("models.ar.")
    cfg = OmegaConf.load(conf / "tiny_ar_draft.yaml")
    assert cfg.pop("defaults")[0] == {"override /sampler@_global_.sampler": "token"}  # the family's default sampler
    dec = decoder_for(instantiate(cfg, path=str(ar_dir), draft_path=str(mtp_dir)), None)
    assert isinstance(dec, Decoder) and dec.label == "ar+mtp" and dec.model.name == "tiny_ar_draft"
