"""What a model config decodes as, resolved once, and the one place a decoder is built from it.

`decoder_plan` reads the family (`contract.families`) off the model config a single time and runs the checks every
decoder needs before its weights load (a sampler of the model's family, the family's own config checks); then
`build_decoder(plan)` loads the model and wraps it in the family's engine. The CLI (`harness.run`, through
`harness.runner.preflight`), the Python API (`harness.api`), lm-eval's CLI (`harness.runner.lmeval_cli`) and each
shard (`harness.launch.shards`) go through these two, so they agree on what they check and build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from contract.decoding import DecoderKind
from contract.families import Family, family_of
from harness.engine.decoders import check_sampler_fits
from harness.runner.configs import model_kind, samplers_of


@dataclass(frozen=True)
class DecoderPlan:
    """A checked model config and sampler: the family, the model class (`target`) and its kind, resolved once."""

    family: Family
    kind: DecoderKind
    target: str  # the model config's `_target_`: the class that loads the checkpoint
    model: DictConfig  # the model config: instantiated by `build_decoder`
    sampler: Any  # the sampler config, instantiated for `build_decoder` (None: the engine's default)
    direct: bool = False  # load by calling the class with the model keys (the API: the class's own errors, unwrapped)


def decoder_plan(model, sampler, family_checks: bool = True, direct: bool = False) -> DecoderPlan:
    """Resolve the family of `model` (a model config) once and check `sampler` (a sampler config, instantiated or
    not) against it, then the family's own checks (`Family.config_check`; `family_checks=False` for a partial model
    config, whose missing keys the loading class's own defaults fill and check). Reads no weights."""
    model = model if isinstance(model, DictConfig) else OmegaConf.create(model)
    kind = model_kind(model)
    family = family_of(kind)
    try:
        check_sampler_fits(family, sampler)
    except ValueError as e:
        raise ValueError(f"{e}; {model.get('name')}'s family: {sorted(samplers_of(family))}") from None
    if family_checks and family.config_check and sampler is not None:
        get_method(family.config_check)(model, sampler)
    return DecoderPlan(family, kind, str(model.get("_target_")), model, sampler, direct)


def load_model(plan: DecoderPlan):
    """The plan's model, loaded (weights and tokenizer): `build_decoder`'s first half, for a caller that reads the
    loaded model (the commit a hub id resolved to) before the engine is built."""
    if plan.direct:
        from hydra.utils import get_class

        kwargs = {k: v for k, v in OmegaConf.to_container(plan.model).items() if k != "_target_"}
        return get_class(plan.target)(**kwargs)
    return instantiate(plan.model)


def build_decoder(plan: DecoderPlan, model=None):
    """The plan's model (`model`, when already loaded by `load_model`) in its family's engine: the one place a
    decoder is built (`harness.engine.decoders.decoder_for`)."""
    from harness.engine.decoders import decoder_for

    return decoder_for(load_model(plan) if model is None else model, plan.sampler)


def compose_plan(overrides: list[str] | None = None) -> DecoderPlan:
    """Compose conf/ exactly as `python -m harness.run <overrides>` would, and plan its decoder with the CLI's checks
    before loading (the model path, the family's samplers and its own checks)."""
    from hydra import compose, initialize_config_dir

    from contract.paths import REPO_ROOT
    from harness.runner.configs import check_model_path, register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides or []))
    sampler = instantiate(cfg.sampler)
    check_model_path(cfg.model)
    return decoder_plan(cfg.model, sampler)


def checkpoint_plan(path: str, kind: str, sampler: str | None, knobs: dict, model_kwargs: dict | None) -> DecoderPlan:
    """A checkpoint (local folder or hub id) of the family `kind` names, with a sampler by name (default: the
    family's) and its knobs, validated before any weights load (the Python API's `load_decoder`)."""
    from harness.runner.configs import SAMPLERS

    family = family_of(kind)
    name = sampler or family.default_sampler
    if name not in SAMPLERS:
        raise ValueError(f"sampler: unknown {name!r}; the {kind} family's: {samplers_of(family)}")
    config = SAMPLERS[name](**knobs)  # validated here: a bad knob fails before the weights load
    model = {"_target_": family.models[0], "path": path, **(model_kwargs or {})}
    return decoder_plan(model, config, family_checks=False, direct=True)
