"""transformers 4.x names that the masked family's remote code takes (models/compat/remote_compat.py): plain RoPE's
`ROPE_INIT_FUNCTIONS["default"]` computed as transformers' own, and remote code written against 4.x loading through
the adapter (`trust_remote_code`, a local folder with its own modeling file and `auto_map`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from harness.engine.masked import MaskedDiffusionDecoder
from models.compat import remote_compat
from models.masked_diffusion import MaskedDiffusionAdapter
from models.tiny import build_masked
from samplers.masked import BlockRefinementConfig

OLD_REMOTE_CODE = """
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.utils import LossKwargs  # transformers 4.x (SDAR)
from transformers.utils.import_utils import is_torch_fx_available  # transformers 4.x (LLaDA 2.0)


class OldRemoteConfig(LlamaConfig):
    model_type = "old_remote_llama"


class OldGenerationConfig(GenerationConfig):
    def validate(self, is_init=False):  # transformers 4.x's signature (Dream's DreamGenerationConfig)
        pass


class OldRemoteForCausalLM(LlamaForCausalLM):
    config_class = OldRemoteConfig

    def __init__(self, config):
        super().__init__(config)
        # as LLaDA 2, SDAR and Dream build their rotary embedding: the table's "default" entry
        inv_freq, self.attention_scaling = ROPE_INIT_FUNCTIONS["default"](config, None)
        self.model.rotary_emb.inv_freq = inv_freq

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):  # as Dream's: its own generation config class
        model = super().from_pretrained(path, *args, **kwargs)
        model.generation_config = OldGenerationConfig.from_pretrained(path)
        return model
"""


def test_a_generation_config_validate_of_transformers_4_takes_the_new_keywords():
    """Subclasses defined after `apply()` get the keywords their old-style `validate` does not take dropped; one
    taking **kwargs is left as it is."""
    from transformers import GenerationConfig

    remote_compat.apply()
    seen = []

    class Old(GenerationConfig):
        def validate(self, is_init=False):
            seen.append(is_init)

    class New(GenerationConfig):
        def validate(self, *args, **kwargs):
            seen.append(sorted(kwargs))

    Old(max_new_tokens=4).update(max_new_tokens=8)  # transformers 5: validate(user_set_attributes=...)
    New().update(max_new_tokens=8)
    assert False in seen and ["user_set_attributes"] in seen


def test_default_rope_equals_transformers_own():
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16, rope_theta=5000.0)
    want, scale = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    got, got_scale = remote_compat.default_rope(cfg)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got_scale == scale == 1.0
    cfg.partial_rotary_factor = 0.5  # LLaDA 2 rotates half of each head
    assert remote_compat.default_rope(cfg)[0].shape == (4,)
    torch.testing.assert_close(remote_compat.default_rope(None, base=5000.0, dim=16)[0], want)  # old-style callers


@pytest.fixture(scope="module")
def old_remote_dir(tmp_path_factory):
    out = build_masked(tmp_path_factory.mktemp("old_remote"), block_length=4)
    (out / "modeling_old.py").write_text(OLD_REMOTE_CODE)
    cfg = json.loads((out / "config.json").read_text())
    cfg["model_type"] = "old_remote_llama"
    cfg["auto_map"] = {
        "AutoConfig": "modeling_old.OldRemoteConfig",
        "AutoModelForCausalLM": "modeling_old.OldRemoteForCausalLM",
    }
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.slow  # a subprocess that imports transformers: ~6 s
def test_remote_code_of_transformers_4_loads_through_the_adapter(old_remote_dir, tmp_path):
    """Without the names the remote module fails to import on transformers 5; through the adapter it loads and
    decodes the plain twin's tokens (same weights, same RoPE)."""
    load = f"AutoModelForCausalLM.from_pretrained({str(old_remote_dir)!r}, trust_remote_code=True)"
    bare = f"from transformers import AutoModelForCausalLM; {load}"
    env = {"HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0 and "LossKwargs" in proc.stderr
    kw = {"dtype": "float64", "context": "cache", "eos_token_ids": [1], "num_threads": 1}
    remote = MaskedDiffusionAdapter(str(old_remote_dir), trust_remote_code=True, **kw)
    assert type(remote.model).__name__ == "OldRemoteForCausalLM"
    assert type(remote.model.generation_config).__name__ == "OldGenerationConfig"
    twin = build_masked(tmp_path / "twin", block_length=4)  # the same seed: the same weights, no remote code
    plain = MaskedDiffusionAdapter(str(twin), **kw)
    assert type(plain.model).__name__ == "LlamaForCausalLM"
    from contract.records import GenerationRequest

    reqs = [
        GenerationRequest(str(i), plain.encode(t), seed=i, max_new_tokens=12) for i, t in enumerate(["Hi", "abc def"])
    ]
    cfg = BlockRefinementConfig(threshold=0.8, steps_per_block=4)
    want = [r.token_ids for r in MaskedDiffusionDecoder(plain, cfg).generate(reqs)]
    assert [r.token_ids for r in MaskedDiffusionDecoder(remote, cfg).generate(reqs)] == want
