"""Every `conf/model/*.yaml` names only parameters its `_target_` takes, so a GPU config (`model=diffusiongemma_26b`)
cannot fail at instantiation with an unknown key after the run has started (no GPU model loads here)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from models.diffusion_gemma import DiffusionGemmaAdapter
from models.diffusion_gemma_ar import DiffusionGemmaARDecoder
from models.masked_ar import MaskedARDecoder
from models.masked_diffusion import MaskedDiffusionAdapter
from tests.helpers.app import compose_app

CONF = Path(__file__).resolve().parents[1] / "conf"
# **kwargs handed to another class's constructor
FORWARDS = {DiffusionGemmaARDecoder: DiffusionGemmaAdapter, MaskedARDecoder: MaskedDiffusionAdapter}


def _parameters(cls) -> set[str]:
    """Named constructor parameters, following **kwargs to the base class (or the class it forwards to)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names
        if klass in FORWARDS:
            return names | _parameters(FORWARDS[klass])
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "model").glob("*.yaml")))
def test_model_config_keys_are_constructor_parameters(name):
    """The composed `model` group (its defaults list applied), as `harness.run` instantiates it."""
    cfg = OmegaConf.to_container(compose_app(f"model={name}").model)
    target = get_class(cfg.pop("_target_"))
    unknown = set(cfg) - _parameters(target)
    assert not unknown, f"model={name}: {sorted(unknown)} are not parameters of {target.__name__}"
