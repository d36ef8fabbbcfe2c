"""The notebook API: a tiny model saved to a local folder loads through the same path as a hub id."""

from __future__ import annotations

import pytest

from harness import api


def test_load_and_generate_from_local_folder(tiny_diffusion_dir):
    dec = api.load_decoder(
        str(tiny_diffusion_dir), max_steps=2, model_kwargs={"dtype": "float32", "eos_token_ids": [1]}
    )
    res = api.generate(dec, ["hello", [{"role": "user", "content": "hi"}]], max_new_tokens=8)
    assert len(res) == 2 and all(r.nfe == 2 and r.num_tokens > 0 for r in res)
    again = api.generate(dec, ["hello", [{"role": "user", "content": "hi"}]], max_new_tokens=8)
    assert [r.token_ids for r in again] == [r.token_ids for r in res]


def test_decoder_from_config_matches_cli_composition(tiny_diffusion_dir):
    dec = api.decoder_from_config(
        [f"model.path={tiny_diffusion_dir}", "sampler=confidence_topk", "sampler.max_steps=3"]
    )
    assert dec.sampler.name == "confidence_topk" and dec.sampler.max_steps == 3
    assert dec.model.path == str(tiny_diffusion_dir)


def test_unknown_sampler_is_rejected_before_loading():
    with pytest.raises(ValueError, match="sampler"):
        api.load_decoder("does/not-matter", sampler="nope")


def test_same_loader_takes_a_hub_id_offline():
    """A hub id goes through from_pretrained too; offline and uncached it fails with the hub's own error."""
    with pytest.raises(OSError):
        api.load_decoder("google/diffusiongemma-26B-A4B-it")


@pytest.fixture(scope="module")
def masked_dir(tmp_path_factory):
    from models.tiny import build_masked

    return build_masked(tmp_path_factory.mktemp("api_masked"), block_length=8)


def test_load_decoder_decodes_a_masked_model_as_the_cli_does(masked_dir):
    """kind="masked" with the family's default sampler decodes exactly as `model=tiny_masked` composed by the CLI
    (no sampler named there either: the model config carries it)."""
    prompts = ["hello", [{"role": "user", "content": "hi"}]]
    dec = api.load_decoder(str(masked_dir), kind="masked", model_kwargs={"context": "cache", "eos_token_ids": [1]})
    assert dec.label == "masked" and dec.sampler.name == "block_refinement"
    res = api.generate(dec, prompts, max_new_tokens=16)
    assert all(r.nfe > 0 and r.num_tokens > 0 for r in res)
    cli = api.decoder_from_config(["model=tiny_masked", f"model.path={masked_dir}", "+model.eos_token_ids=[1]"])
    assert [r.token_ids for r in api.generate(cli, prompts, max_new_tokens=16)] == [r.token_ids for r in res]
    sampled = api.load_decoder(str(masked_dir), "low_confidence", kind="masked", temperature=1.0, steps_per_block=8)
    assert api.generate(sampled, ["hello"], max_new_tokens=16)[0].steps_per_canvas[-2:] == [8, 8]  # one per step


def test_load_decoder_builds_the_ar_families(tmp_path):
    from models.tiny import build_ar

    target, draft = build_ar(tmp_path / "ar"), build_ar(tmp_path / "draft", seed=1)
    kw = {"dtype": "float32", "device": "cpu"}
    ar = api.load_decoder(str(target), kind="ar", model_kwargs=kw)
    assisted = api.load_decoder(str(target), kind="ar+draft", model_kwargs={**kw, "draft_path": str(draft)})
    assert (ar.label, assisted.label) == ("ar", "ar+draft")
    assert api.generate(ar, ["hello"], max_new_tokens=4)[0].num_tokens > 0
    assert ar.sampler.name == "token" and not ar.sampler.do_sample  # the family's default token rule: greedy
    sampled = api.load_decoder(str(target), kind="ar", model_kwargs=kw, do_sample=True, temperature=1.5)
    assert sampled.describe()["temperature"] == 1.5 and sampled.sampler.do_sample


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kind": "masked", "sampler": "entropy_bound"}, "uniform-state sampler on a masked model"),
        ({"kind": "diffusion", "sampler": "remdm"}, "masked sampler on a diffusion model"),
        ({"kind": "ar", "sampler": "entropy_bound"}, "uniform-state sampler on a ar model"),
        ({"kind": "ar+draft", "do_sample": True, "temperature": 0.0}, "sampler.temperature"),
        ({"kind": "diffusion", "sampler": "token"}, "AR token sampler on a diffusion model"),
        ({"kind": "masked", "threshold": 2.0}, "sampler.threshold"),
        ({"kind": "unicorn"}, "kind: unknown decoding family"),
    ],
)
def test_load_decoder_refuses_before_loading(kwargs, match):
    with pytest.raises(ValueError, match=match):
        api.load_decoder("does/not-matter", **kwargs)
