"""Names that the masked family's remote modeling code (`trust_remote_code`) takes from transformers 4.x and that
transformers 5 removed, put back before such code loads (docs/masked.md, "Hub models against their remote code").

- `ROPE_INIT_FUNCTIONS["default"]`: LLaDA 2, SDAR and Dream look up plain RoPE's entry when their rotary embedding
  is built (transformers 5 moved it into each model class), so they failed with `KeyError: 'default'`.
- `transformers.utils.LossKwargs`: SDAR subclasses it (a TypedDict of loss keywords, now `TransformersKwargs`).
- `transformers.utils.import_utils.is_torch_fx_available`: LLaDA 2.0-era code asks it before wrapping a mask helper.
- `GenerationConfig.validate`'s keywords: transformers 5 calls it with `strict` / `user_set_attributes`; Dream's own
  `DreamGenerationConfig.validate(self, is_init=False)` then raised a TypeError inside `from_pretrained`. Subclasses
  defined from now on (remote code loads after this) get the keywords their `validate` does not take dropped.

`fit_remote_class` is applied to the one remote model class about to be loaded (after its code is imported, before
it is built), for model classes written against 4.x:
- `post_init()`: transformers 5 reads what it records (`all_tied_weights_keys`, ...) while loading; LLaDA 8B's
  `LLaDAModelLM.__init__` never calls it (`AttributeError: ... 'all_tied_weights_keys'`). The class's `__init__` is
  followed by `post_init()` where the instance has not run it.
- `tie_weights(self)`: 5.x calls it with `missing_keys` / `recompute_mapping`; LLaDA 8B's takes neither. The
  keywords a remote class's own method does not take are dropped.
`fit_remote_config` does the same for its config class, setting fields the instance lacks after its `__init__`:
- `use_cache` as it was passed: transformers 5's config `__init__` drops the generation parameters it is passed, so a
  4.x config that hands `use_cache` on (LLaDA 8B's `LLaDAConfig`) has none, and the model's forward
  (`self.config.use_cache`) fails where no `use_cache` is passed;
- `pad_token_id` / `bos_token_id` / `eos_token_id` as None, 4.x's defaults: 5.x's base config has none, and SDAR's
  model reads `config.pad_token_id`, which its config.json does not set.
The other config fields the four families' files read (`output_attentions`, `output_hidden_states`,
`use_return_dict`) are still there.

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


def drop_unknown_keywords(cls: type, name: str) -> bool:
    """A class's own method `name` that lacks a keyword transformers' method of that name takes (a 4.x signature
    called with 5.x's keywords) is wrapped to drop the keywords it does not take; returns whether it was wrapped."""
    own = cls.__dict__.get(name)
    if own is None or getattr(own, "__wrapped__", None) is not None:
        return False
    params = inspect.signature(own).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return False
    base = next((vars(k)[name] for k in cls.__mro__ if _from_transformers(k) and name in vars(k)), None)
    if base is None or set(inspect.signature(base).parameters) <= set(params):
        return False

    @functools.wraps(own)
    def method(self, *args, **kwargs):
        return own(self, *args, **{k: v for k, v in kwargs.items() if k in params})

    setattr(cls, name, method)
    return True


def _init_generation_subclass(cls, **kwargs) -> None:
    super(_generation_config(), cls).__init_subclass__(**kwargs)
    drop_unknown_keywords(cls, "validate")


def _from_transformers(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "transformers"


def fit_remote_class(cls: type) -> None:
    """Makes a remote model class written for transformers 4.x loadable by 5.x (module docstring), only adding:
    transformers' own classes are never touched. `fitted(model)` says what a built model needed."""
    if "_remote_compat_fitted" in vars(cls):
        return
    wrapped = [k.__name__ for k in cls.__mro__ if not _from_transformers(k) and drop_unknown_keywords(k, "tie_weights")]
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if "all_tied_weights_keys" not in vars(self):  # its __init__ never called post_init (4.x allowed it)
            self.post_init()
            self._remote_compat_late_post_init = True

    cls.__init__ = __init__
    cls._remote_compat_fitted = tuple(f"{name}.tie_weights: keywords it does not take dropped" for name in wrapped)


# config fields transformers 5 drops from a config's kwargs that the families' remote code reads
RESTORED_CONFIG_FIELDS = ("use_cache",)
# fields transformers 4.x's base config always set (to these defaults) that 5.x's lacks
LEGACY_CONFIG_DEFAULTS = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def fit_remote_config(cls: type) -> None:
    """A remote config class's `__init__` is followed by setting what the instance lacks: `RESTORED_CONFIG_FIELDS` as
    passed (or defaulted), `LEGACY_CONFIG_DEFAULTS` (module docstring); transformers' own classes are never touched."""
    if "_remote_compat_fitted" in vars(cls) or _from_transformers(cls):
        return
    init = cls.__init__
    defaults = {n: p.default for n, p in inspect.signature(init).parameters.items() if p.default is not p.empty}

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        given = defaults | kwargs  # as passed by keyword (from_pretrained passes config.json's keys so), else defaults
        values = {k: given[k] for k in RESTORED_CONFIG_FIELDS if k in given} | LEGACY_CONFIG_DEFAULTS
        missing = {k: v for k, v in values.items() if k not in vars(self)}
        for name, value in missing.items():
            setattr(self, name, value)
        if missing:  # recorded on the class: an instance attribute would be saved with the config
            cls._remote_compat_fitted = (f"{cls.__name__}: {sorted(missing)} set as transformers 4.x set them",)

    cls.__init__ = __init__
    cls._remote_compat_fitted = ()


def fitted(model: Any) -> list[str]:
    """What `fit_remote_class` added that this model uses (for `describe()`)."""
    out = list(getattr(type(model), "_remote_compat_fitted", ()))
    if vars(model).get("_remote_compat_late_post_init"):
        out.append(f"{type(model).__name__}: post_init() run after its __init__, which does not call it")
    return out + list(getattr(type(getattr(model, "config", None)), "_remote_compat_fitted", ()))


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
