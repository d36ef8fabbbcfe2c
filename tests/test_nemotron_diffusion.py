"""Nemotron-Labs-Diffusion's block diffusion mode through the masked adapter and engine, on a tiny stand-in.

The stand-in is remote code written by us (never the hub file) with the behaviour the public sources describe for
`NemotronLabsDiffusionModel` (docs/masked.md#nemotron-labs-diffusion): an `encoder` body and a `diffusion_head`,
loaded through `AutoModel` from `auto_map`; each attention layer carries a `diffusion_lm` flag, true after loading,
under which it drops whatever mask it is given and attends every key (cache and input) bidirectionally, and false
under which it reads the mask as an ordinary causal LM; a cache passed with `use_cache=False` is read, not written.
`_reference` is the published `generate(causal_context=True, threshold=...)` written as a plain loop (greedy,
batch 1): a causal prefill seeds the first block, each block is denoised bidirectionally over the cache (the top
masked position always, the others at confidence >= threshold, until no mask is left or an EOS has none before
it), then encoded causally into the cache, which also seeds the next block. The adapter loads it with the shipped
`conf/model/nemotron_diffusion_8b.yaml` (path, device and dtype overridden) and decodes it with `fast_dllm_masked`.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from contract.records import GenerationRequest
from harness.engine.decoders import decoder_for
from harness.engine.masked import MaskedDiffusionDecoder
from models.loading.masked_checks import check_masked_model
from models.tiny import MASK, char_tokenizer
from samplers.masked import FastDllmConfig, LowConfidenceConfig

STAND_IN = '''
import torch
from torch import nn
from transformers import LlamaConfig, LlamaModel, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaAttention


class NldStandInConfig(LlamaConfig):
    model_type = "nld_stand_in"


class ModeAttention(LlamaAttention):
    """diffusion_lm true: the given mask is dropped and every key attended; false: an ordinary masked attention."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.diffusion_lm = True

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        self.is_causal = not self.diffusion_lm
        mask = None if self.diffusion_lm else attention_mask
        return super().forward(hidden_states, position_embeddings, mask, past_key_values, **kwargs)


class NldStandInModel(PreTrainedModel):
    config_class = NldStandInConfig
    base_model_prefix = "encoder"
    _no_split_modules = ["LlamaDecoderLayer"]
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.mask_token_id = config.mask_token_id
        self.encoder = LlamaModel(config)
        for i, layer in enumerate(self.encoder.layers):
            layer.self_attn = ModeAttention(config, i)
        self.diffusion_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def forward(self, input_ids, attention_mask=None, position_ids=None, labels=None, past_key_values=None,
                use_cache=None, use_causal_mask=False, **kwargs):
        read_only = past_key_values is not None and not use_cache
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           past_key_values=past_key_values, use_cache=True if read_only else use_cache)
        if read_only:  # the cache is read, not written
            past_key_values.crop(-input_ids.shape[1])
        logits = self.diffusion_head(out.last_hidden_state)
        return CausalLMOutputWithPast(logits=logits, past_key_values=out.past_key_values)
'''

YAML = "conf/model/nemotron_diffusion_8b.yaml"
TEXTS = ["Hi", "The quick brown", "Once upon a time there", "abc", "Q: 2+2?", "Hello world, how"]


def _stand_in_class(folder):
    spec = importlib.util.spec_from_file_location("nld_stand_in_build", folder / "modeling_nld.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def build_stand_in(out, block_size: int, seed: int = 0):
    """A random tiny stand-in saved as a hub snapshot would be: weights, tokenizer, config with `auto_map`, code."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "modeling_nld.py").write_text(STAND_IN)
    mod = _stand_in_class(out)
    tok = char_tokenizer()
    tok.add_special_tokens({"mask_token": MASK})
    torch.manual_seed(seed)
    cfg = mod.NldStandInConfig(
        vocab_size=(len(tok) + 7) // 8 * 8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    cfg.mask_token_id, cfg.block_size = tok.mask_token_id, block_size
    model = mod.NldStandInModel(cfg)
    with torch.no_grad():
        model.encoder.norm.weight.mul_(40.0)  # confidences spread over (0, 1): the threshold has work to do
    model.save_pretrained(out)
    tok.save_pretrained(out)
    conf = json.loads((out / "config.json").read_text())
    conf["auto_map"] = {"AutoConfig": "modeling_nld.NldStandInConfig", "AutoModel": "modeling_nld.NldStandInModel"}
    (out / "config.json").write_text(json.dumps(conf))
    return out


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("nld")
    return {n: build_stand_in(root / f"B{n}", n) for n in (4, 8)}


def _shipped(path, **over):
    """The shipped yaml, run here: the stand-in's folder (its mask id, block and EOS: the checkpoint's), the CPU,
    float64 (no near-tie flips between paths)."""
    cfg = OmegaConf.load(YAML)
    cfg.pop("defaults")  # the model's default sampler: Hydra's composition, not a constructor argument
    here = {"path": str(path), "device": "cpu", "dtype": "float64", "num_threads": 1}
    cfg.merge_with({**here, "mask_token_id": None, "block_length": None, "eos_token_ids": [1]})
    cfg.merge_with(over)
    return instantiate(cfg)


def _set_mode(model, diffusion: bool) -> None:
    for m in model.modules():
        if hasattr(m, "diffusion_lm"):
            m.diffusion_lm = diffusion


@torch.no_grad()
def _reference(model, prompt: list[int], g: int, block: int, threshold: float | None, eos: int, mask: int):
    """The published block diffusion loop (greedy, batch 1); returns (new tokens cut after the first EOS, nfe)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    _set_mode(model, False)
    out = model(torch.tensor([prompt]), past_key_values=cache, use_cache=True, use_causal_mask=True)
    seed = int(out.logits[0, -1].argmax())
    gen, nfe = [], 0
    for _ in range(g // block):
        cur = [seed] + [mask] * (block - 1)
        share = [(block - 1) // block + (i < (block - 1) % block) for i in range(block)]
        for i in range(block):
            masked = [t == mask for t in cur]
            if not any(masked):
                break
            _set_mode(model, True)
            logits = model(torch.tensor([cur]), past_key_values=cache, use_cache=False).logits[0]
            nfe += 1
            probs = logits.softmax(-1)
            tok = probs.argmax(-1)
            conf = [float(probs[j, tok[j]]) if masked[j] else -1.0 for j in range(block)]
            order = sorted((j for j in range(block) if masked[j]), key=lambda j: -conf[j])
            take = order if threshold is not None else order[: share[i]]
            take = take[:1] + [j for j in take[1:] if threshold is None or conf[j] >= threshold]
            for j in take:
                cur[j] = int(tok[j])
            if eos in cur and mask not in cur[: cur.index(eos)]:
                break
        _set_mode(model, False)
        out = model(torch.tensor([cur]), past_key_values=cache, use_cache=True, use_causal_mask=True)
        nfe += 1
        seed = int(out.logits[0, -1].argmax())
        gen += cur
        if eos in gen:
            return gen[: gen.index(eos) + 1], nfe
    return gen, nfe


def _requests(ad, g, texts=TEXTS):
    return [GenerationRequest(str(i), ad.encode(t), seed=i, max_new_tokens=g) for i, t in enumerate(texts)]


def _frequent_token(ad, cfg, g) -> int:
    from collections import Counter

    out = MaskedDiffusionDecoder(ad, cfg).generate(_requests(ad, g))
    return Counter(t for r in out for t in r.token_ids[1:]).most_common(1)[0][0]


@pytest.mark.parametrize("block", [4, 8])
@pytest.mark.parametrize("threshold", [0.9, 0.5, None])
def test_block_diffusion_equals_its_own_loop_token_for_token(stand_ins, block, threshold):
    """Batch 1, greedy, each prompt alone: the engine's tokens equal the published loop's; with EOS never written
    the forwards are equal too (its causal prefill is not counted, its last block's causal pass is; our seed forwards
    are one per block). With a frequent token as EOS the rows stop mid-block (tokens compared up to the EOS)."""
    g = 3 * block
    ad = _shipped(stand_ins[block])
    assert ad.attention == "prefix_causal" and ad.ar_seeded and ad.mask_id == ad.tokenizer.mask_token_id
    cfg = FastDllmConfig(threshold=threshold) if threshold is not None else LowConfidenceConfig(steps_per_block=block)
    ends = []
    for eos in (ad.vocab_size + 5, _frequent_token(ad, cfg, g)):  # never written, then often written
        ad.eos_ids = {eos}
        for req in _requests(ad, g):
            got = MaskedDiffusionDecoder(ad, cfg).generate([req])[0]
            ends.append(got.finished_by)
            want, nfe = _reference(ad.model, req.prompt_ids, g, block, threshold, eos, ad.mask_id)
            _set_mode(ad.model, False)  # the yaml's module_attrs: the reference loop toggled them
            assert got.token_ids == want[: len(got.token_ids)] and len(got.token_ids) == len(want)
            if eos > ad.vocab_size:
                assert got.nfe == nfe
    assert "eos" in ends  # the EOS path ran


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_batched_rows_of_different_lengths_decode_as_each_alone(stand_ins, temperature):
    """Continuous batching (rows of different prompt lengths, refilled as they finish) changes no row's tokens,
    greedy or sampled (the draws are keyed by sample, block and forward, the AR-opened first token's included)."""
    ad = _shipped(stand_ins[4])
    cfg = FastDllmConfig(threshold=0.9, temperature=temperature)
    reqs = _requests(ad, 12)
    alone = [MaskedDiffusionDecoder(ad, cfg).generate([r])[0].token_ids for r in reqs]
    together = MaskedDiffusionDecoder(ad, cfg).stream(reqs, batch_size=3)
    assert {r.sample_id: r.token_ids for r in together} == {r.sample_id: t for r, t in zip(reqs, alone, strict=True)}


def test_without_the_mode_flag_the_model_drops_our_mask_and_decodes_otherwise(stand_ins):
    """`module_attrs: {diffusion_lm: false}` is what makes the stand-in honour our mask: left true (as the model
    loads), its diffusion-mode attention ignores the mask, the context is no longer causal and tokens differ."""
    ad = _shipped(stand_ins[4])
    raw = _shipped(stand_ins[4], module_attrs=None)
    assert raw.describe()["module_attrs"] == {} and ad.describe()["module_attrs"] == {"diffusion_lm": False}
    cfg = FastDllmConfig(threshold=0.9)
    reqs = _requests(ad, 12)
    want = [_reference(ad.model, r.prompt_ids, 12, 4, 0.9, -1, ad.mask_id)[0] for r in reqs]
    _set_mode(ad.model, False)
    assert [r.token_ids for r in MaskedDiffusionDecoder(ad, cfg).generate(reqs)] == want
    assert [r.token_ids for r in MaskedDiffusionDecoder(raw, cfg).generate(reqs)] != want


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"attention": "prefix_causal", "context": "recompute", "shifted_logits": False}, "model.context"),
        ({"attention": "prefix_causal", "context": "cache", "shifted_logits": False, "module_attrs": [1]}, "attrs"),
    ],
)
def test_bad_prefix_causal_configs_fail_naming_the_key(kw, key):
    with pytest.raises(ValueError, match=key):
        check_masked_model(**kw)


def test_a_module_attr_no_module_has_is_refused(stand_ins):
    with pytest.raises(InstantiationException, match="model.module_attrs.diffusion_mode: no submodule"):
        _shipped(stand_ins[4], module_attrs={"diffusion_mode": False})


AR_YAML = "conf/model/nemotron_diffusion_8b_ar.yaml"


@torch.no_grad()
def _ar_reference(model, prompt: list[int], g: int, eos: int) -> list[int]:
    """The published AR mode (greedy, batch 1): a causal prefill, then one single-token forward per new token."""
    from transformers import DynamicCache

    _set_mode(model, False)
    cache, out, ids = DynamicCache(), [], torch.tensor([prompt])
    for _ in range(g):
        tok = int(model(ids, past_key_values=cache, use_cache=True).logits[0, -1].argmax())
        out.append(tok)
        if tok == eos:
            break
        ids = torch.tensor([[tok]])
    return out


def test_ar_mode_equals_its_own_ar_loop_token_for_token(stand_ins):
    """The AR yaml (path, device, dtype overridden) decodes the stand-in's causal mode on the AR engine: equal to the
    published greedy AR loop, one forward per token (TPF 1), rows alone and batched alike."""
    from models.masked_ar import MaskedARDecoder

    cfg = OmegaConf.load(AR_YAML)
    assert cfg.pop("defaults")[0] == {"override /sampler@_global_.sampler": "token"}  # the AR families' sampler
    here = {"path": str(stand_ins[4]), "device": "cpu", "dtype": "float64", "num_threads": 1}
    ad = instantiate(cfg, **here, mask_token_id=None, block_length=None, eos_token_ids=[1], attn_implementation=None)
    assert isinstance(ad, MaskedARDecoder) and ad.describe()["module_attrs"] == {"diffusion_lm": False}
    dec = decoder_for(ad, None)
    reqs = _requests(dec, 10)
    for eos in (ad.adapter.vocab_size + 5, 74):
        dec.engine.eos_ids = ad.adapter.eos_ids = {eos}
        got = dec.generate(reqs)
        for req, res in zip(reqs, got, strict=True):
            assert res.token_ids == _ar_reference(ad.adapter.model, req.prompt_ids, 10, eos)
            assert res.nfe == len(res.token_ids)
        batched = {r.sample_id: r.token_ids for r in dec.stream(reqs, batch_size=2)}
        assert batched == {r.sample_id: r.token_ids for r in got}
    with pytest.raises(InstantiationException, match="model.head: .* no submodule 'lm_head'"):
        instantiate(cfg, **here, mask_token_id=None, block_length=None, eos_token_ids=[1], head="lm_head")


def test_the_memory_estimate_reads_a_remote_config_the_yaml_trusts(stand_ins):
    """`harness.run` sizes an AR-mode batch from the config before loading: a remote config (`auto_map` with
    `AutoModel` only) is read when the yaml trusts remote code and its model counted on `meta`, else refused."""
    from models.planning import memory

    config = memory.load_config(str(stand_ins[4]), trust_remote_code=True)
    assert memory.count_parameters(config) == sum(p.numel() for p in _shipped(stand_ins[4]).model.parameters())
    with pytest.raises(ValueError, match="trust_remote_code"):
        memory.load_config(str(stand_ins[4]))
