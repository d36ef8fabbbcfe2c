"""Which decoder a built model gets: the one dispatch for every family, so runs, shards and the API agree.

The model's `kind` names its family (`contract.families`); the family names its engine (uniform-state block
diffusion: `harness.engine.decode`; masked: `harness.engine.masked`; an alternative chosen by the sampler's
`decoder`, e.g. diffusers' pipeline; every AR family: `harness.engine.ar`, with its token rule). A sampler of
another family is refused here too (the runner refuses it before loading).
"""

from __future__ import annotations

from hydra.utils import get_class

from contract.families import MASKED, TOKEN, UNIFORM, Family, family_of

GROUP_WORDS = {UNIFORM: "uniform-state", MASKED: "masked", TOKEN: "AR token"}


def sampler_group(sampler) -> str:
    """The group a sampler config belongs to (its `family`; the uniform-state samplers declare none)."""
    return getattr(sampler, "family", None) or UNIFORM


def check_sampler_fits(family: Family, sampler) -> None:
    """A sampler of another family is refused; None (the engine's own default) always fits."""
    if sampler is None:
        return
    name = getattr(sampler, "name", sampler)
    if sampler_group(sampler) != family.sampler_group:
        raise ValueError(
            f"sampler={name}: a {GROUP_WORDS[sampler_group(sampler)]} sampler on a {family.kind} model; it takes "
            f"{GROUP_WORDS[family.sampler_group]} samplers (its default: {family.default_sampler})"
        )


def decoder_for(model, sampler):
    """The family's engine around a built model and its sampler (an alternative engine where the sampler names one:
    decoder=diffusers); a sampler of another family is refused."""
    family = family_of(getattr(model, "kind", "ar"))
    check_sampler_fits(family, sampler)
    engine = family.engines.get(getattr(sampler, "decoder", None), family.engine)
    return get_class(engine)(model, sampler)
