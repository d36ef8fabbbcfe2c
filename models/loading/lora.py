"""LoRA adapters (peft) that respect weights shared between modules: one adapter per weight, exact merges.

DiffusionGemma's causal encoder and bidirectional decoder are separate modules holding the *same* weight tensors.
peft's default wrapping gives each module its own LoRA pair, so every shared weight gets two adapters: unmerged,
the encoder and decoder each see only their own delta; merged, `merge_and_unload` adds both deltas to the one
tensor, and the merged model computes something else (logits off by ~0.65 on a tiny model, `tests/test_lora.py`).
Here each module that holds exactly the tensors of an earlier module is aliased to that module *before* peft
wraps, so peft (which walks de-duplicated modules) wraps it once; afterwards the alias is pointed at the wrapper,
so encoder and decoder run through one adapter. Merging then adds each delta once and restores the original
modules, still sharing their (merged) tensors.

Targets: every `nn.Linear` except the output head and vision/audio towers (text-only fine-tunes), plus the
MoE experts' 3-D weights, which are parameters rather than Linear modules (peft `target_parameters`). A model
without shared weights (the Gemma 4 AR baseline) goes through the same functions with nothing aliased.
Adapters are peft folders (`adapter_config.json` + `adapter_model.safetensors`); load them with `load_adapter`
(plain `PeftModel.from_pretrained` would double-wrap a DiffusionGemma again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # peft is imported where an adapter is made or loaded: a model without one never needs it
    from peft import LoraConfig, PeftModel

EXCLUDED_PARTS = ("vision", "audio", "lm_head")  # module-path parts never adapted (not text layers / the head)


@dataclass
class LoraSpec:
    """LoRA hyperparameters. The official DiffusionGemma Sudoku recipe: rank 8 on all linear layers + experts."""

    rank: int = 8
    alpha: float = 16.0  # scale = alpha / rank
    experts: bool = True  # also adapt the MoE experts' 3-D weights (peft target_parameters)


@dataclass
class Alias:
    """A module whose parameters are exactly those of an earlier (canonical) module."""

    path: str
    canonical: str
    original: nn.Module


def _is_targetable(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or _expert_params(module) != []


def _expert_params(module: nn.Module) -> list[str]:
    if not type(module).__name__.endswith("Experts"):
        return []
    return [n for n, p in module.named_parameters(recurse=False) if p.ndim == 3]


def _excluded(path: str) -> bool:
    return any(part in path for part in EXCLUDED_PARTS)


def shared_aliases(model: nn.Module) -> list[Alias]:
    """Targetable modules whose own parameters are the same tensors as an earlier module's (decoder -> encoder)."""
    first: dict[tuple[int, ...], str] = {}
    out = []
    for path, module in model.named_modules():
        if not _is_targetable(module):
            continue
        key = tuple(id(p) for _, p in sorted(module.named_parameters(recurse=False)))
        if not key:
            continue
        if key in first:
            out.append(Alias(path, first[key], module))
        else:
            first[key] = path
    return out


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


def _alias(model: nn.Module, aliases: list[Alias]) -> None:
    for a in aliases:
        _set(model, a.path, model.get_submodule(a.canonical))


def targets(model: nn.Module, spec: LoraSpec) -> tuple[list[str], list[str]]:
    """(Linear module paths, expert parameter paths) to adapt, each shared weight once (canonical path)."""
    shared = {a.path for a in shared_aliases(model)}
    modules, params = [], []
    for path, module in model.named_modules():
        if path in shared or _excluded(path):
            continue
        if isinstance(module, nn.Linear):
            modules.append(path)
        elif spec.experts:
            params += [f"{path}.{name}" for name in _expert_params(module)]
    if not modules and not params:
        raise ValueError(
            f"no LoRA targets in {type(model).__name__}: no nn.Linear / expert weights outside {EXCLUDED_PARTS}"
        )
    return modules, params


def lora_config(model: nn.Module, spec: LoraSpec) -> LoraConfig:
    if spec.rank < 1:
        raise ValueError(f"lora.rank: must be >= 1, got {spec.rank}")
    from peft import LoraConfig

    modules, params = targets(model, spec)
    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=0.0,  # peft's parameter (expert) adapters cannot apply dropout
        target_modules=modules,
        target_parameters=params or None,
        bias="none",
    )


def _bind(model: nn.Module, peft_model: PeftModel, aliases: list[Alias]) -> PeftModel:
    """Point every alias at its canonical module's wrapper, so both sides run one adapter."""
    _alias(model, aliases)
    peft_model.shared_aliases = aliases  # what save/merge must undo
    return peft_model


def attach_lora(model: nn.Module, spec: LoraSpec) -> PeftModel:
    """Wrap `model` with fresh LoRA adapters (B = 0: the output is unchanged), one per shared weight; only the
    LoRA parameters are trainable."""
    from peft import get_peft_model

    aliases = shared_aliases(model)
    config = lora_config(model, spec)
    _alias(model, aliases)  # before wrapping: peft walks de-duplicated modules, so each shared weight wraps once
    return _bind(model, get_peft_model(model, config), aliases)


def load_adapter(model: nn.Module, path: str | Path, merge: bool = True) -> nn.Module:
    """Load a LoRA adapter folder saved by `save_adapter` onto `model` (the same base it was trained on).

    `merge=True` returns the plain model with the deltas merged (same modules and speed as the base; what the
    harness evaluates); `merge=False` returns the PeftModel (unmerged, for tests and further training)."""
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"model.adapter: {path} holds no adapter_config.json (not a LoRA adapter folder)")
    from peft import PeftModel

    aliases = shared_aliases(model)
    _alias(model, aliases)
    peft_model = _bind(model, PeftModel.from_pretrained(model, str(path)), aliases)
    return merge_adapter(peft_model) if merge else peft_model


def merge_adapter(peft_model: PeftModel) -> nn.Module:
    """Add each LoRA delta to its weight exactly once and return the plain model with its original modules
    (aliases restored and re-tied to the merged tensors)."""
    aliases: list[Alias] = getattr(peft_model, "shared_aliases", [])
    model = peft_model.merge_and_unload()  # walks de-duplicated modules: one merge per shared weight
    for a in aliases:
        canonical = model.get_submodule(a.canonical)
        for name, _ in a.original.named_parameters(recurse=False):
            setattr(a.original, name, getattr(canonical, name))
        _set(model, a.path, a.original)
    return model


def save_adapter(peft_model: PeftModel, path: str | Path) -> Path:
    """Save the adapter weights (each shared weight's adapter once, under its canonical path) with peft."""
    aliases: list[Alias] = getattr(peft_model, "shared_aliases", [])
    model = peft_model.base_model.model
    for a in aliases:  # hide the aliases so the state dict names each adapter once
        _set(model, a.path, a.original)
    try:
        peft_model.save_pretrained(str(path))
    finally:
        _alias(model, aliases)
    return Path(path)


def lora_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable LoRA tensors by name (each once)."""
    return {n: p for n, p in model.named_parameters() if "lora_" in n}
