"""Small masked LMs with their own modeling code in the style of transformers 4.x, written for the tests (never copies
of the hub files): each reproduces one habit of the masked hub families' remote code that transformers 5 loads
wrongly or not at all. `build_standin` saves one as a local checkpoint (`trust_remote_code`, `auto_map`) and returns
the in-memory model it was saved from, built by the class's own `__init__` as transformers 4.x built it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from models.tiny import MASK, char_tokenizer

MODELING = '''
"""4.x-style stand-ins (tests/helpers/remote_standins.py)."""
import torch
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class Old4xConfig(PretrainedConfig):
    model_type = "old4x_masked"

    def __init__(self, vocab_size=96, hidden_size=32, num_heads=2, num_layers=2, rope_theta=10000.0, tie_head=False,
                 use_cache=False, **kwargs):
        self.vocab_size, self.hidden_size, self.num_heads = vocab_size, hidden_size, num_heads
        self.num_layers, self.rope_theta, self.tie_head = num_layers, rope_theta, tie_head
        super().__init__(use_cache=use_cache, **kwargs)  # 4.x's base config kept use_cache (LLaDA 8B's does this)


class Rotary(nn.Module):
    def __init__(self, dim, theta):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # set here only, as the hub files do

    def forward(self, x, pos):
        angle = (pos[..., None].float() * self.inv_freq)[:, None]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], dim=-1)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, self.heads = config.hidden_size, config.num_heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm, self.mlp = nn.LayerNorm(d), nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.rotary = Rotary(d // self.heads, config.rope_theta)

    def forward(self, h, pos, bias):
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm(h)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, pos), self.rotary(k, pos)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        scores = scores if bias is None else scores + bias
        h = h + self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return h + self.mlp(h)


class Old4xPreTrained(PreTrainedModel):
    config_class = Old4xConfig
    base_model_prefix = "old4x"

    def _init_weights(self, module):  # 4.x habit: Linear and Embedding only; the rotary buffer is left to __init__
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, 0.2)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()

    def build(self, config):
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def run(self, input_ids, bias, position_ids=None):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        pos = pos if position_ids is None else position_ids
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h, pos, bias)
        return CausalLMOutput(logits=self.head(self.norm(h)))


class Old4xNoGenerationLM(Old4xPreTrained):
    """An additive 4D mask and position_ids, as LLaDA 2 / Dream take them; calls post_init. No GenerationMixin (and
    no prepare_inputs_for_generation): transformers 5 gives it no generation_config."""

    def __init__(self, config):
        super().__init__(config)
        self.build(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, **kwargs):
        return self.run(input_ids, attention_mask, position_ids)


class Old4xMaskedLM(Old4xNoGenerationLM, GenerationMixin):
    """The same with GenerationMixin, as LLaDA 2 / Dream have it."""


class Old4xRandomBufferLM(Old4xMaskedLM):
    """A non-persistent buffer drawn at random in __init__: no fresh init can say what it should hold."""

    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("noise", torch.randn(4), persistent=False)


class Old4xNoPostInitLM(Old4xPreTrained, GenerationMixin):
    """LLaDA 8B's habits: __init__ never calls post_init, tie_weights(self) takes no keywords, the forward reads
    config.use_cache when it is given none."""

    def __init__(self, config):
        super().__init__(config)
        self.build(config)

    def tie_weights(self):
        if self.config.tie_head:
            self.head.weight = self.embed.weight

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, **kwargs):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        return self.run(input_ids, attention_mask, position_ids)


class Old4xFlatMaskLM(Old4xPreTrained, GenerationMixin):
    """LLaDA 8B's mask handling: no position_ids; any mask is flattened to (B, 1, 1, -1), read as 1 = seen, and
    added to the scores."""

    def __init__(self, config):
        super().__init__(config)
        self.build(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, use_cache=None, **kwargs):
        bias = None
        if attention_mask is not None:
            seen = attention_mask.to(torch.float).view(input_ids.shape[0], -1)[:, None, None, :]
            bias = (1.0 - seen) * torch.finfo(seen.dtype).min
        return self.run(input_ids, bias)
'''

# a modeling file importing a package that is not installed, as SDAR's imports flash_attn
MISSING_IMPORT = "from some_missing_package_for_tests import something  # noqa\n"


@dataclass
class Standin:
    path: Path
    model: torch.nn.Module  # the in-memory model the checkpoint was saved from
    mask_id: int


def _import(path: Path):
    name = f"standin_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_standin(out: Path, cls: str, seed: int = 0, prefix: str = "", **config) -> Standin:
    """Saves stand-in class `cls` as a local checkpoint with its own code: modeling file (`prefix` prepended),
    config.json with `auto_map`, random weights (safetensors), the tiny char tokenizer with a mask token."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "modeling_old4x.py").write_text(MODELING)  # imported in memory before any import line is prepended
    module = _import(out / "modeling_old4x.py")
    (out / "modeling_old4x.py").write_text(prefix + MODELING)
    tok = char_tokenizer()
    tok.add_special_tokens({"mask_token": MASK})
    cfg = module.Old4xConfig(vocab_size=(len(tok) + 7) // 8 * 8, **config)
    torch.manual_seed(seed)
    model = getattr(module, cls)(cfg).eval()
    if hasattr(type(model), "tie_weights") and "tie_weights" in vars(type(model)):
        model.tie_weights()
    with torch.no_grad():
        model.norm.weight.mul_(8.0)  # confidences spread over (0, 1)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    fields = {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "num_heads", "num_layers", "rope_theta")}
    fields |= {"tie_head": cfg.tie_head, "use_cache": False, "mask_token_id": tok.mask_token_id, "block_length": 4}
    auto = {"AutoConfig": "modeling_old4x.Old4xConfig", "AutoModelForCausalLM": f"modeling_old4x.{cls}"}
    meta = {"model_type": "old4x_masked", "architectures": [cls], "auto_map": auto}
    (out / "config.json").write_text(json.dumps(meta | fields, indent=1))
    tok.save_pretrained(out)
    return Standin(out, model, tok.mask_token_id)
