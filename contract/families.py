"""The decoding families: the one place that says what a family is.

A family is how a checkpoint turns into tokens: the classes that load it, the engine that decodes it, the samplers
that drive it and the default one (the AR families': their token rule, `samplers.token_rule`), the shape of a decode
step for the memory estimate, the config checks it needs before loading, and the series labels its runs carry. Dispatch
(`harness.engine.decoders`), the entry point, the Python API, the config checks and the sampler listing read this
table; nothing else branches on the family. Every target is a dotted name resolved when used, so this module imports
nothing heavy (composing a config stays torch-free).

Adding a family: its adapter (and engine, if it needs one) in their modules, its configs under conf/, and one entry
here. `tests/test_family_registry.py` holds every entry to its classes (their `kind`), its samplers and its functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.decoding import DecoderKind

# the sampler groups (a sampler config's `family`; uniform when it has none): every family takes one
UNIFORM, MASKED, TOKEN = "uniform", "masked", "token"


@dataclass(frozen=True)
class Family:
    kind: DecoderKind
    summary: str
    models: tuple[str, ...]  # classes that build a model of the family (the first is the API's loader)
    engine: str  # the decoder (`contract.decoding.Decoder`) built around a loaded model
    sampler_group: str  # UNIFORM / MASKED / TOKEN: the samplers it takes
    default_sampler: str
    decode_shape: str  # function: the positions a decode step holds, for the memory estimate
    config_check: str | None = None  # function(model cfg, sampler) run before loading, beyond the common checks
    scorer: str | None = None  # function(adapter, LikelihoodConfig) -> its likelihood scorer (lm-eval's loglikelihood)
    engines: dict[str, str] = field(default_factory=dict)  # alternative engines, chosen by the `decoder` config
    labels: tuple[DecoderKind, ...] = ()  # series labels its runs may carry besides `kind`


_SHAPES = "harness.runner.decode_shapes"
AR_ENGINE = "harness.engine.ar.ARFamilyDecoder"  # every AR family: the adapter's target (+ drafter) on one engine

FAMILIES: dict[DecoderKind, Family] = {
    f.kind: f
    for f in (
        Family(
            DecoderKind.DIFFUSION,
            "uniform-state block diffusion (DiffusionGemma): canvases denoised in parallel, committed left to right",
            models=("models.diffusion_gemma.DiffusionGemmaAdapter",),
            engine="harness.engine.decode.BlockDiffusionDecoder",
            engines={"diffusers": "harness.engine.diffusers_decoder.DiffusersDecoder"},
            sampler_group=UNIFORM,
            default_sampler="entropy_bound",
            decode_shape=f"{_SHAPES}.block_diffusion",
            scorer="models.likelihood_uniform.DecisionReadScorer",  # a pseudo-likelihood: docs/likelihood.md
            labels=(DecoderKind.SELF_SPECULATIVE, DecoderKind.ROUTED),  # hybrid: the same weights' AR mode verifies
        ),
        Family(
            DecoderKind.MASKED,
            "masked (absorbing-state) diffusion: LLaDA 2.x, SDAR, LLaDA, Dream; masked positions filled per block",
            models=("models.masked_diffusion.MaskedDiffusionAdapter",),
            engine="harness.engine.masked.MaskedDiffusionDecoder",
            sampler_group=MASKED,
            default_sampler="block_refinement",
            decode_shape=f"{_SHAPES}.masked",
            scorer="models.likelihood_masked.MaskedELBOScorer",  # LLaDA's Monte-Carlo ELBO
            config_check="harness.runner.configs.check_masked_config",
        ),
        Family(
            DecoderKind.AR,
            "autoregressive: one token per forward, continuous batching on a slot KV cache",
            models=("models.ar.ARDecoder",),
            engine=AR_ENGINE,
            sampler_group=TOKEN,
            default_sampler="token",  # samplers.token_rule: greedy unless do_sample
            decode_shape=f"{_SHAPES}.autoregressive",
            scorer="models.likelihood_ar.ar_scorer",  # exact, as lm-eval's HFLM
        ),
        Family(
            DecoderKind.AR_DRAFT,
            "AR + draft / MTP: a drafter proposes k tokens, the target verifies them in one forward",
            models=("models.ar.AssistedARDecoder",),  # model_kwargs: draft_path
            engine=AR_ENGINE,
            sampler_group=TOKEN,
            default_sampler="token",  # samplers.token_rule: greedy unless do_sample
            decode_shape=f"{_SHAPES}.assisted",
            scorer="models.likelihood_ar.ar_scorer",  # the target's exact log-likelihood (drafts change no score)
            labels=(DecoderKind.AR_MTP,),
        ),
        Family(
            DecoderKind.AR_SAME_WEIGHTS,
            "a diffusion checkpoint decoding autoregressively with its own weights (DiffusionGemma, Nemotron)",
            models=("models.diffusion_gemma_ar.DiffusionGemmaARDecoder", "models.masked_ar.MaskedARDecoder"),
            engine=AR_ENGINE,
            sampler_group=TOKEN,
            default_sampler="token",  # samplers.token_rule: greedy unless do_sample
            decode_shape=f"{_SHAPES}.autoregressive",
        ),
    )
}


def family_of(kind: str) -> Family:
    """The family of a kind or of a series label (`ar+mtp` -> AR + draft, `routed` -> diffusion)."""
    for fam in FAMILIES.values():
        if kind == fam.kind or kind in fam.labels:
            return fam
    raise ValueError(f"kind: unknown decoding family {kind!r}; one of {sorted(names())}")


def names() -> list[str]:
    """Every kind and label a user may name (the API's `kind`)."""
    return [str(k) for fam in FAMILIES.values() for k in (fam.kind, *fam.labels)]


def family_of_target(target: str) -> Family | None:
    """The family whose registered model classes include `target` ("pkg.module.Class"); None for other classes."""
    return next((fam for fam in FAMILIES.values() if target in fam.models), None)
