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
