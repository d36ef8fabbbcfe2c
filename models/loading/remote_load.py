"""Loading a hub model that ships its own code (`trust_remote_code`) so that it runs the first time, or is refused.

- Packages a model's code imports (`model.requires`) are checked before anything is downloaded: transformers reads
  a remote file's imports only after fetching it, and then names no install line. `model.torch_fallbacks` opts in
  to a pure-torch stand-in where one is faithful (`models.compat.flash_attn_torch`).
- The remote model class is fitted for transformers 5 before it is built
(`models.compat.remote_compat.fit_remote_class`).
- Non-persistent buffers are repaired after loading (`repair_buffers`): transformers 5 builds the model on the meta
  device, materialises such buffers with `torch.empty`, and refills them only through the model's `_init_weights`;
  classes written for 4.x set them in `__init__` (rotary `inv_freq`) and leave them out of `_init_weights`, so they
  hold whatever memory held, and the checkpoint does not store them. Each is recomputed by the model's own
  `__init__` (the class built again from its config, parameters on the meta device, buffers real) and copied in; a
  buffer that cannot be matched, is not finite, or differs between two fresh builds refuses the model.
- EOS ids are read from the model's generation config, else the folder's `generation_config.json` (a remote class
  without `GenerationMixin` has none), plus the tokenizer's.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from contract.text import default_eos_ids
from models.compat import flash_attn_torch, remote_compat
from models.loading.masked_checks import FALLBACK_NAMES

FALLBACKS = {"flash_attn": flash_attn_torch}  # package -> its pure-torch stand-in (module with `install()`)
assert set(FALLBACKS) == set(FALLBACK_NAMES)  # the torch-free checks name the same stand-ins


class RefusedModel(ValueError):
    """A loaded model whose state cannot be trusted (its buffers): it is never decoded."""


@dataclass(frozen=True)
class BufferCheck:
    """Non-persistent buffers compared with a fresh init: how many, and those repaired (name -> what it held)."""

    checked: int
    repaired: dict[str, str] = field(default_factory=dict)


def install_fallbacks(torch_fallbacks: list[str] | None) -> list[str]:
    """The stand-ins asked for whose package is not installed, put in place; returns those used."""
    return [name for name in torch_fallbacks or [] if FALLBACKS[name].install()]


def fit_remote_classes(path: str, auto_name: str, revision: str | None = None) -> None:
    """The remote config class and the model class `auto_name` names in the checkpoint's `auto_map`, fitted for
    transformers 5 (`models.compat.remote_compat`) before either is built. They are imported as the auto classes import
    them (same module, same file hash), so the auto classes then build the fitted ones."""
    from transformers import PretrainedConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    remote_compat.apply()  # transformers 4.x names that the families' remote code still takes
    auto_map = PretrainedConfig.get_config_dict(path, revision=revision)[0].get("auto_map") or {}
    fits = {"AutoConfig": remote_compat.fit_remote_config, auto_name: remote_compat.fit_remote_class}
    for key, fit in fits.items():
        if key in auto_map:
            fit(get_class_from_dynamic_module(auto_map[key], path, revision=revision))


def load_pretrained(auto, path: str, trust_remote_code: bool, **kwargs: Any) -> torch.nn.Module:
    """`auto.from_pretrained`, remote classes fitted first (`fit_remote_classes`)."""
    if trust_remote_code:
        fit_remote_classes(path, auto.__name__, kwargs.get("revision"))
    return auto.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# buffers


def non_persistent_buffers(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for prefix, module in model.named_modules():
        for name, buf in module._buffers.items():
            if buf is not None and name in module._non_persistent_buffers_set:
                yield (f"{prefix}.{name}" if prefix else name), buf


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Parameters are moved to the meta device as they are registered (no memory, no init cost); buffers stay real."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            module._parameters[name] = type(p)(p.to("meta"), **{**vars(p), "requires_grad": p.requires_grad})

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype.is_floating_point else before)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def fresh_buffers(model: torch.nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """The non-persistent buffers the model's own `__init__` (and `post_init`) sets, from its class and config, built
    under the default dtype the loader built it under (its parameters' dtype), with the CPU generator seeded by `seed`
    (two seeds tell a drawn buffer from a computed one). The caller's random state is left as it was."""
    with torch.random.fork_rng(devices=[]), _parameters_on_meta(), _default_dtype(model.dtype):
        torch.default_generator.manual_seed(seed)  # the CPU one only: fork_rng restores only that
        fresh = type(model)(copy.deepcopy(model.config))
    return dict(non_persistent_buffers(fresh))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN equal to NaN (two fresh inits that both hold NaN agree; the finiteness check refuses it)."""
    if a.shape != b.shape or not a.is_floating_point():
        return a.shape == b.shape and torch.equal(a, b)
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def repair_buffers(model: torch.nn.Module) -> BufferCheck:
    """Every non-persistent buffer set to a fresh init's value and verified (module docstring); `RefusedModel` names
    each buffer that cannot be."""
    loaded = dict(non_persistent_buffers(model))
    if not loaded:
        return BufferCheck(0)
    fresh, again = fresh_buffers(model, seed=0), fresh_buffers(model, seed=1)
    problems, repaired = [], {}
    for name, buf in loaded.items():
        want = fresh.get(name)
        if want is None or want.shape != buf.shape:
            got = "none" if want is None else f"shape {tuple(want.shape)}"
            problems.append(f"{name} {tuple(buf.shape)}: a fresh init has {got} (set outside __init__?)")
            continue
        if not _same(want, again[name]):
            problems.append(f"{name}: two fresh inits differ (drawn at random, or uninitialised memory, in __init__)")
            continue
        want = want.to(device=buf.device, dtype=buf.dtype)
        if not torch.equal(buf, want):
            repaired[name] = _difference(buf, want)
            with torch.no_grad():
                buf.copy_(want)
        if buf.is_floating_point() and not torch.isfinite(buf).all():
            problems.append(f"{name}: not finite in a fresh init")
        elif not torch.equal(buf, want):
            problems.append(f"{name}: still differs from a fresh init after the repair")
    if problems:
        raise RefusedModel(
            f"{type(model).__name__}: refused, its buffers as loaded cannot be trusted and a fresh init of its class "
            "does not fix them: " + "; ".join(problems)
        )
    return BufferCheck(len(loaded), repaired)


def _difference(buf: torch.Tensor, want: torch.Tensor) -> str:
    if buf.is_floating_point() and not torch.isfinite(buf).all():
        return "not finite as loaded"
    return f"max |loaded - fresh| {(buf.double() - want.double()).abs().max().item():.3g}"


# ---------------------------------------------------------------------------------------------------------------
# EOS


def eos_ids_of(model, tokenizer, path: str | None = None, revision: str | None = None) -> list[int]:
    """The one default-EOS rule (`contract.text.default_eos_ids`) over the model's generation config, else the
    checkpoint folder's `generation_config.json`; a clear error where neither nor the tokenizer names one."""
    from transformers import GenerationConfig

    gen = getattr(model, "generation_config", None)
    where = f"{type(model).__name__}.generation_config"
    if gen is None and path is not None:
        where = f"{type(model).__name__} has no generation config (no GenerationMixin); {path}/generation_config.json"
        with contextlib.suppress(OSError, ValueError):
            gen = GenerationConfig.from_pretrained(path, revision=revision)
    try:
        return default_eos_ids(gen, tokenizer)
    except ValueError:
        raise ValueError(
            f"model.eos_token_ids: not set, and no EOS id in {where} nor in the tokenizer: set it in the model yaml"
        ) from None
