"""Names that the masked family's remote modeling code (`trust_remote_code`) takes from transformers 4.x and that
transformers 5 removed, put back before such code loads (docs/masked.md, "Hub models against their remote code").

- `ROPE_INIT_FUNCTIONS["default"]`: LLaDA 2, SDAR and Dream look up plain RoPE's entry when their rotary embedding
  is built (transformers 5 moved it into each model class), so they failed with `KeyError: 'default'`.
- `transformers.utils.LossKwargs`: SDAR subclasses it (a TypedDict of loss keywords, now `TransformersKwargs`).
- `transformers.utils.import_utils.is_torch_fx_available`: LLaDA 2.0-era code asks it before wrapping a mask helper.
- `GenerationConfig.validate`'s keywords: transformers 5 calls it with `strict` / `user_set_attributes`; Dream's own
  `DreamGenerationConfig.validate(self, is_init=False)` then raised a TypeError inside `from_pretrained`. Subclasses
  defined from now on (remote code loads after this) get the keywords their `validate` does not take dropped.

Only what is missing is added, nothing is replaced, so native models and newer remote code see transformers as it is.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


def default_rope(config: Any, device: Any = None, seq_len: int | None = None, **rope_kwargs: Any):
    """transformers 4.x's `_compute_default_rope_parameters`: plain RoPE's inverse frequencies over the rotary part of
    a head (`partial_rotary_factor`), and an attention scaling of 1. Old-style callers pass `base` and `dim`."""
    if rope_kwargs.get("dim") is not None:
        base, dim = rope_kwargs["base"], int(rope_kwargs["dim"])
    else:
        params = getattr(config, "rope_parameters", None) or {}
        base = getattr(config, "rope_theta", None) or params.get("rope_theta", 10000.0)
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head * (getattr(config, "partial_rotary_factor", None) or params.get("partial_rotary_factor", 1.0)))
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
    return 1.0 / (base**exponent), 1.0


def tolerant_validate(cls: type) -> None:
    """A subclass's own `validate` without `**kwargs` is wrapped to drop the keywords it does not take."""
    own = cls.__dict__.get("validate")
    if own is None:
        return
    params = inspect.signature(own).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return

    @functools.wraps(own)
    def validate(self, *args, **kwargs):
        return own(self, *args, **{k: v for k, v in kwargs.items() if k in params})

    cls.validate = validate


def _init_generation_subclass(cls, **kwargs) -> None:
    super(_generation_config(), cls).__init_subclass__(**kwargs)
    tolerant_validate(cls)


def _generation_config() -> type:
    from transformers import GenerationConfig

    return GenerationConfig


def apply() -> list[str]:
    """Adds the missing names; returns those it added (empty on transformers 4.x)."""
    from transformers import modeling_rope_utils, utils
    from transformers.utils import import_utils

    added = []
    if "default" not in modeling_rope_utils.ROPE_INIT_FUNCTIONS:
        modeling_rope_utils.ROPE_INIT_FUNCTIONS["default"] = default_rope
        added.append("ROPE_INIT_FUNCTIONS['default']")
    if not hasattr(utils, "LossKwargs"):
        utils.LossKwargs = utils.TransformersKwargs
        added.append("transformers.utils.LossKwargs")
    if not hasattr(import_utils, "is_torch_fx_available"):
        import_utils.is_torch_fx_available = lambda: False
        added.append("transformers.utils.import_utils.is_torch_fx_available")
    gen = _generation_config()
    if "user_set_attributes" in inspect.signature(gen.validate).parameters and "__init_subclass__" not in vars(gen):
        gen.__init_subclass__ = classmethod(_init_generation_subclass)
        added.append("GenerationConfig subclasses: validate() keywords they do not take dropped")
    return added
