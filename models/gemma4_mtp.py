"""Load (and, for tests, build) a Gemma 4 MTP drafter (`gemma4_assistant`) that works under transformers 5.23.

Two defects in transformers 5.23 block the MTP path, so this module works around both, narrowly:

1. A `gemma4_assistant` must share the K/V of *every* layer (`Gemma4AssistantConfig.validate_architecture`
   demands `num_kv_shared_layers == num_hidden_layers`), but `Gemma4TextConfig.kv_sharing_modes` raises
   "The set of layer types producing a cache is different..." for exactly that case, so no assistant,
   released or tiny, can be constructed. While the drafter is built we give an all-shared text config the
   modes it needs (every layer "reuse": it reads the K/V the target hands over in `shared_kv_states`).
2. A target without KV sharing (`num_kv_shared_layers == 0`, e.g. gemma-4-26B-A4B) never writes its K/V
   into `shared_kv_states`, so the drafter finds nothing to attend to. `export_shared_kv` marks the last
   attention layer of each type as the "store" layer, as 5.23 already does for targets that do share K/V.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4TextConfig,
)

ASSISTANT_MODEL_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
_ATTENTION_CLASSES = ("Gemma4TextAttention", "Gemma4UnifiedTextAttention")


def _text_config_classes() -> list[type]:
    classes: list[type] = [Gemma4TextConfig]
    with contextlib.suppress(ImportError):
        from transformers.models.gemma4_unified.configuration_gemma4_unified import Gemma4UnifiedTextConfig

        classes.append(Gemma4UnifiedTextConfig)
    return classes


@contextlib.contextmanager
def all_shared_kv_modes():
    """While active, a text config whose layers are all KV-shared reports every layer as "reuse" (defect 1)."""
    originals = {cls: cls.__dict__["kv_sharing_modes"] for cls in _text_config_classes()}

    def patched(original):
        def modes(self):
            n = self.num_hidden_layers
            if self.num_kv_shared_layers and self.num_kv_shared_layers == n:
                return ["reuse"] * n
            return original.fget(self)

        return property(modes)

    try:
        for cls, original in originals.items():
            cls.kv_sharing_modes = patched(original)
        yield
    finally:
        for cls, original in originals.items():
            cls.kv_sharing_modes = original


def load_assistant(name_or_path: str, **from_pretrained_kwargs) -> torch.nn.Module:
    """`AutoModelForCausalLM.from_pretrained` for a Gemma 4 MTP drafter, with defect 1 worked around."""
    with all_shared_kv_modes():
        return AutoModelForCausalLM.from_pretrained(name_or_path, **from_pretrained_kwargs)


def export_shared_kv(target: torch.nn.Module) -> list[int]:
    """Make a target without KV sharing hand its K/V to the drafter (defect 2); return the storing layer indices.

    The last attention layer of each type stores its (full-length) K/V in `shared_kv_states`, which is what
    the drafter's cross-attention reads. A target that already has store layers is left alone.
    """
    attn = [m for m in target.modules() if type(m).__name__ in _ATTENTION_CLASSES]
    if not attn:
        raise ValueError(
            f"{type(target).__name__} has no Gemma 4 text attention layers; an MTP drafter needs a Gemma 4 target"
        )
    if any(m.store_full_length_kv for m in attn):
        return [m.layer_idx for m in attn if m.store_full_length_kv]
    last: dict[str, torch.nn.Module] = {}
    for m in attn:
        last[m.layer_type] = m  # modules() walks layers in order, so the last one of each type wins
    for m in last.values():
        m.store_full_length_kv = True
    return sorted(m.layer_idx for m in last.values())


def build_tiny_assistant(out_dir: str | Path, target_dir: str | Path, layers: int = 2, seed: int = 0) -> Path:
    """Save a random tiny `gemma4_assistant` drafter for the tiny Gemma 4 target saved in `target_dir`.

    It copies the target's attention geometry (the drafter attends to the target's K/V) and sets
    `backbone_hidden_size` to the target's hidden size; layer types cycle through the target's types.
    """
    target_cfg = AutoConfig.from_pretrained(target_dir).get_text_config()
    text = target_cfg.to_dict()
    types = list(dict.fromkeys(target_cfg.layer_types))
    layer_types = [types[i % len(types)] for i in range(layers)]
    if "full_attention" in types:
        layer_types[-1] = "full_attention"  # Gemma 4 forces the last layer to full attention anyway
    for key in ("per_layer_config", "architectures", "model_type", "transformers_version", "dtype"):
        text.pop(key, None)
    text.update(
        num_hidden_layers=len(layer_types),
        layer_types=layer_types,
        num_kv_shared_layers=len(layer_types),
        vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0,
        global_head_dim=target_cfg.per_layer_config[target_cfg.layer_types.index("full_attention")].head_dim
        if "full_attention" in target_cfg.layer_types
        else target_cfg.head_dim,
        num_global_key_value_heads=1,
    )
    config = Gemma4AssistantConfig(text_config=Gemma4TextConfig(**text), backbone_hidden_size=target_cfg.hidden_size)
    torch.manual_seed(seed)
    with all_shared_kv_modes():
        model = Gemma4AssistantForCausalLM(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    return out
