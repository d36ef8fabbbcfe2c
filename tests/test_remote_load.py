"""Hub models with their own code load as their code means them to, or are refused (models/loading/remote_load.py,
models/compat/remote_compat.py): 4.x-style stand-ins written for these tests (tests/helpers/remote_standins.py), each
with
one habit of the masked families' remote files, loaded through the adapter under transformers 5."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest
import torch

from models.loading.masked_checks import check_masked_model
from models.masked_diffusion import MaskedDiffusionAdapter
from tests.helpers.remote_standins import MISSING_IMPORT, build_standin

KW = {"dtype": "float32", "trust_remote_code": True, "num_threads": 1, "block_length": 4}


def _load(standin, **kw) -> MaskedDiffusionAdapter:
    return MaskedDiffusionAdapter(str(standin.path), **(KW | {"eos_token_ids": [1]} | kw))


def _probe(model, **kw) -> torch.Tensor:
    ids = torch.tensor([[7, 12, 30, 9, 44, 5, 61, 18, 25, 3]])
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False, **kw).logits


def test_a_rotary_buffer_set_only_in_init_is_repaired_after_loading(tmp_path):
    """transformers 5 leaves it as torch.empty memory: as loaded, the logits must equal the in-memory model's and
    inv_freq a fresh init's; `describe()` names what was repaired."""
    standin = build_standin(tmp_path / "rotary", "Old4xMaskedLM")
    adapter = _load(standin)
    for name, buf in standin.model.named_buffers():
        torch.testing.assert_close(adapter.model.get_buffer(name), buf, rtol=0, atol=0)
    torch.testing.assert_close(_probe(adapter.model), _probe(standin.model), rtol=0, atol=0)
    d = adapter.describe()
    assert d["buffers_checked"] == 2  # one rotary module per layer
    assert set(d["buffers_repaired"]) == {"layers.0.rotary.inv_freq", "layers.1.rotary.inv_freq"}


def test_a_buffer_a_fresh_init_cannot_give_refuses_the_model(tmp_path):
    """rope_theta 0: the model's own __init__ computes an infinite inv_freq; a model that would decode with it is
    refused, naming the buffer, before any forward."""
    standin = build_standin(tmp_path / "bad_theta", "Old4xMaskedLM", rope_theta=0.0)
    with pytest.raises(ValueError, match=r"refused.*layers\.0\.rotary\.inv_freq: not finite") as refused:
        _load(standin)
    assert type(refused.value).__name__ == "RefusedModel"


def test_a_buffer_drawn_at_random_in_init_refuses_the_model(tmp_path):
    standin = build_standin(tmp_path / "random", "Old4xRandomBufferLM")
    with pytest.raises(ValueError, match=r"refused.*noise: two fresh inits differ"):
        _load(standin)


def test_a_buffer_registered_outside_init_cannot_be_matched_and_refuses(tmp_path):
    from models.loading import remote_load

    standin = build_standin(tmp_path / "late", "Old4xMaskedLM")
    model = MaskedDiffusionAdapter(str(standin.path), **(KW | {"eos_token_ids": [1]})).model
    model.layers[0].register_buffer("late_table", torch.zeros(3), persistent=False)
    with pytest.raises(remote_load.RefusedModel, match=r"layers\.0\.late_table \(3,\): a fresh init has none"):
        remote_load.repair_buffers(model)


def test_a_model_that_never_calls_post_init_with_a_4x_tie_weights_loads(tmp_path):
    """LLaDA 8B's habits: no post_init (`all_tied_weights_keys`), `tie_weights(self)` (no `recompute_mapping`), and
    a config whose `use_cache` transformers 5 drops while its forward reads it."""
    standin = build_standin(tmp_path / "no_post_init", "Old4xNoPostInitLM", tie_head=True)
    adapter = _load(standin)
    model = adapter.model
    assert model.head.weight is model.embed.weight  # its own tie_weights ran
    assert model.config.use_cache is False
    with torch.no_grad():  # its forward reads config.use_cache when given none
        model(input_ids=torch.tensor([[7, 12]]))
    torch.testing.assert_close(_probe(model), _probe(standin.model), rtol=0, atol=0)
    compat = " ".join(adapter.describe()["remote_compat"])
    assert "tie_weights" in compat and "post_init" in compat and "use_cache" in compat


def test_a_forward_that_flattens_any_mask_decodes_with_mask_form_padding(tmp_path):
    """LLaDA 8B flattens any mask to (B, 1, 1, -1): our 4D mask crashes it; `mask_form: padding` passes a (B, K)
    key mask, and each row's block logits equal the row run alone without padding."""
    from models.masked_diffusion import BlockQuery

    standin = build_standin(tmp_path / "flat", "Old4xFlatMaskLM")
    kw = {"attention": "bidirectional", "context": "recompute"}
    crashes = _load(standin, **kw)
    queries = [BlockQuery(0, [7, 12, 30, 9], [44, 5, standin.mask_id, standin.mask_id], 8)]
    with pytest.raises(RuntimeError):
        crashes.forward(crashes.open(1), queries, 4)
    adapter = _load(standin, mask_form="padding", **kw)
    short = BlockQuery(1, [3, 8], [21, standin.mask_id, standin.mask_id, standin.mask_id], 6)
    logits = adapter.forward(adapter.open(2), [*queries, short], 4)
    for k, q in enumerate([*queries, short]):
        alone = _probe_ids(standin.model, q.prefix + q.block)
        torch.testing.assert_close(logits[k], alone[0, q.start :], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="mask_form=padding"):
        check_masked_model("block_causal", "recompute", False, 4, "padding")


def _probe_ids(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def test_a_model_without_generation_mixin_reads_eos_from_its_folder(tmp_path):
    standin = build_standin(tmp_path / "no_gen", "Old4xNoGenerationLM")
    (standin.path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 5]}))
    adapter = MaskedDiffusionAdapter(str(standin.path), **KW)
    assert adapter.eos_ids == {1, 5}
    (standin.path / "generation_config.json").unlink()
    tok = json.loads((standin.path / "tokenizer_config.json").read_text())
    (standin.path / "tokenizer_config.json").write_text(json.dumps(tok | {"eos_token": None}))
    with pytest.raises(ValueError, match="model.eos_token_ids: not set, and no EOS id in Old4xNoGenerationLM has no"):
        MaskedDiffusionAdapter(str(standin.path), **KW)


def test_a_missing_package_the_code_imports_fails_before_loading(tmp_path):
    """`model.requires` is checked by the config checks before anything is read: the package named, an install
    line, under 3 s; without the key, transformers' own import check fails only once the files are fetched."""
    from tests.helpers.app import compose_app

    standin = build_standin(tmp_path / "missing", "Old4xMaskedLM", prefix=MISSING_IMPORT)
    with pytest.raises(ImportError, match="some_missing_package_for_tests"):
        _load(standin)
    from harness.runner.plan import decoder_plan

    cfg = compose_app(
        "model=sdar", "sampler=block_refinement", "model.requires=[einops,some_missing_package_for_tests]"
    )
    start = time.perf_counter()
    with pytest.raises(ValueError, match="model.requires: .*some_missing_package_for_tests.*pip install"):
        decoder_plan(cfg.model, cfg.sampler)
    assert time.perf_counter() - start < 3
    with pytest.raises(ValueError, match="model.torch_fallbacks: no pure-torch stand-in for"):
        check_masked_model("block_causal", "cache", False, 4, requires=["x"], torch_fallbacks=["x"])


def test_sdar_yaml_names_flash_attn_with_its_install_line():
    from harness.runner.plan import decoder_plan
    from tests.helpers.app import compose_app

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    cfg = compose_app("model=sdar", "sampler=block_refinement")
    with pytest.raises(ValueError, match="flash_attn, which is not installed: pip install flash-attn"):
        decoder_plan(cfg.model, cfg.sampler)
    opted_in = compose_app("model=sdar", "sampler=block_refinement", "model.torch_fallbacks=[flash_attn]")
    decoder_plan(opted_in.model, opted_in.sampler)


def test_the_flash_attn_fallback_computes_what_flash_attn_computes():
    """RMSNorm in float32 with the output in the input's dtype (the Triton kernel's arithmetic); attention over all
    keys with grouped K/V heads, in flash_attn's (B, L, H, D) layout; anything else refused."""
    from models.compat import flash_attn_torch

    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)
    h = x.float()
    want = (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)
    got = flash_attn_torch.rms_norm_fn(x, weight=w, bias=None, eps=1e-6)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    q, k, v = torch.randn(2, 5, 4, 8), torch.randn(2, 7, 2, 8), torch.randn(2, 7, 2, 8)
    kk, vv = k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)  # query head i reads K/V head i // 2
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kk) * 0.3
    want = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), vv)
    torch.testing.assert_close(flash_attn_torch.flash_attn_func(q, k, v, causal=False, softmax_scale=0.3), want)
    with pytest.raises(NotImplementedError, match="causal=True"):
        flash_attn_torch.flash_attn_func(q, k, v, causal=True)
    with pytest.raises(NotImplementedError, match="residual"):
        flash_attn_torch.rms_norm_fn(x, w, None, residual=x)


FLASH_IMPORTS = """from flash_attn.ops.triton.layer_norm import rms_norm_fn  # noqa
try:
    from flash_attn import flash_attn_func, flash_attn_varlen_func  # noqa
    from flash_attn.bert_padding import pad_input  # noqa
except ImportError:
    pass
"""


@pytest.mark.slow  # a subprocess that imports transformers: ~8 s
def test_a_model_importing_flash_attn_loads_with_the_torch_fallback(tmp_path):
    """In a process of its own (the stand-in stays in sys.modules): without the opt-in the adapter refuses, naming
    flash_attn; with `torch_fallbacks=[flash_attn]` the code's imports resolve to it and the model decodes."""
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    standin = build_standin(tmp_path / "flash", "Old4xMaskedLM", prefix=FLASH_IMPORTS)
    script = f"""
from models.masked_diffusion import MaskedDiffusionAdapter
kw = dict(dtype="float32", trust_remote_code=True, block_length=4, eos_token_ids=[1], requires=["flash_attn"])
try:
    MaskedDiffusionAdapter({str(standin.path)!r}, **kw)
except ValueError as e:
    print("REFUSED", e)
ad = MaskedDiffusionAdapter({str(standin.path)!r}, torch_fallbacks=["flash_attn"], **kw)
import flash_attn, torch
used = ad.describe()["torch_fallbacks"], flash_attn.__torch_fallback__, flash_attn.flash_attn_func.__module__
print("FALLBACK", *used, bool(ad.model(input_ids=torch.tensor([[7, 12]])).logits.isfinite().all()))
"""
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ".", "HF_MODULES_CACHE": str(tmp_path / "m")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "REFUSED model.requires: the model's code imports flash_attn" in proc.stdout
    assert "FALLBACK ['flash_attn'] True models.compat.flash_attn_torch True" in proc.stdout
