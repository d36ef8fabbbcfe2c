"""Which likelihood scorer a model gets: its family's, as the registry (`contract.families`) names it.

AR causal LMs -> the exact log-likelihood (`models.likelihood_ar`); masked diffusion adapters -> the Monte-Carlo ELBO
(`models.likelihood_masked`); uniform-state block-diffusion adapters (DiffusionGemma) -> the decision read
(`models.likelihood_uniform`). A decoder is unwrapped to the model it drives (the `.model` of the engine's
decoders); the same-weights AR decoders are refused (their causal mode has no scorer here yet).
"""

from __future__ import annotations

from hydra.utils import get_method

from contract.families import family_of
from contract.scoring import LikelihoodConfig, Scorer


def _unwrap(decoder_or_model):
    """(model, kind): descend through `.model` while it is one of ours (it carries a family `kind`): an engine decoder
    to its adapter, an AR family decoder to its AR adapter; the transformers module below is never one."""
    inner = getattr(decoder_or_model, "model", None)
    if getattr(inner, "kind", None) is not None:
        return _unwrap(inner)
    return decoder_or_model, getattr(decoder_or_model, "kind", None) or getattr(decoder_or_model, "label", None)


def scorer_for(decoder_or_model, cfg: LikelihoodConfig | None = None) -> Scorer:
    """The family's scorer (`Family.scorer` in `contract.families`) for a built model or the decoder around it."""
    model, kind = _unwrap(decoder_or_model)
    family = family_of(str(kind)) if kind is not None else None
    if family is None or family.scorer is None:
        raise ValueError(
            f"likelihood scoring: no scorer for {type(decoder_or_model).__name__} (kind {kind!r}); loglikelihood tasks "
            "run on AR, masked (model.kind=masked) and uniform-state (DiffusionGemma) models"
        )
    return get_method(family.scorer)(model, cfg or LikelihoodConfig())
