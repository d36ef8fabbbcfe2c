"""Which likelihood scorer a model gets: the one choice per family (a family registry may take it over).

AR causal LMs -> the exact log-likelihood (`models.likelihood_ar`); masked diffusion adapters -> the Monte-Carlo ELBO
(`models.likelihood_masked`); uniform-state block-diffusion adapters (DiffusionGemma) -> the decision read
(`models.likelihood_uniform`). A decoder is unwrapped to the model it drives (the `.model` of the engine's
decoders); the same-weights AR decoders are refused (their causal mode has no scorer here yet).
"""

from __future__ import annotations

from contract.decoding import DecoderKind
from contract.scoring import LikelihoodConfig, Scorer

_AR = (DecoderKind.AR, DecoderKind.AR_MTP, DecoderKind.AR_DRAFT)


def _unwrap(decoder_or_model):
    """(model, kind): descend through `.model` while it is one of ours (it carries a family `kind`): an engine decoder
    to its adapter, an AR family decoder to its AR adapter; the transformers module below is never one."""
    inner = getattr(decoder_or_model, "model", None)
    if getattr(inner, "kind", None) is not None:
        return _unwrap(inner)
    return decoder_or_model, getattr(decoder_or_model, "kind", None) or getattr(decoder_or_model, "label", None)


def scorer_for(decoder_or_model, cfg: LikelihoodConfig | None = None) -> Scorer:
    """The family's scorer for a built model or the decoder around it."""
    cfg = cfg or LikelihoodConfig()
    model, kind = _unwrap(decoder_or_model)
    if kind in _AR:
        from models.likelihood_ar import ExactARScorer

        return ExactARScorer(model.model, model.pad_id, cfg)
    if kind == DecoderKind.MASKED:
        from models.likelihood_masked import MaskedELBOScorer

        return MaskedELBOScorer(model, cfg)
    if kind == DecoderKind.DIFFUSION:
        from models.likelihood_uniform import DecisionReadScorer

        return DecisionReadScorer(model, cfg)
    raise ValueError(
        f"likelihood scoring: no scorer for {type(decoder_or_model).__name__} (kind {kind!r}); loglikelihood tasks run "
        "on AR, masked (model.kind=masked) and uniform-state (DiffusionGemma) models"
    )
