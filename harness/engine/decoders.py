"""Which decoder a built model gets: the one dispatch for every family, so runs, shards and the API agree.

masked adapters -> `harness.engine.masked` (absorbing-state block diffusion); a `decoder=diffusers` sampler ->
diffusers' DiffusionGemmaPipeline (`harness.engine.diffusers_decoder`); uniform-state block-diffusion adapters ->
the continuous-batching engine (`harness.engine.decode`); AR decoders decode themselves (`models.ar_engine`).
A sampler of one family on a model of another is refused here too (the runner refuses it before loading).
"""

from __future__ import annotations

from contract.decoding import DecoderKind
from samplers.masked import MaskedSamplerConfig


def decoder_for(model, sampler):
    kind = getattr(model, "kind", None)
    masked_sampler = isinstance(sampler, MaskedSamplerConfig)
    if kind == DecoderKind.MASKED:
        if not masked_sampler:
            raise ValueError(f"sampler={sampler.name}: a uniform-state sampler on a masked model; use a masked sampler")
        from harness.engine.masked import MaskedDiffusionDecoder

        return MaskedDiffusionDecoder(model, sampler)
    if masked_sampler:
        raise ValueError(f"sampler={sampler.name}: a masked sampler needs a masked model (model.kind=masked)")
    if getattr(sampler, "decoder", None) == "diffusers":
        from harness.engine.diffusers_decoder import DiffusersDecoder

        return DiffusersDecoder(model, sampler)
    if kind == DecoderKind.DIFFUSION:
        from harness.engine.decode import BlockDiffusionDecoder

        return BlockDiffusionDecoder(model, sampler)
    return model
