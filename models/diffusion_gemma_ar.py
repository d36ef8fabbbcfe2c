"""The third baseline: the DiffusionGemma weights decoding autoregressively (no training difference at all).

The checkpoint's causal encoder is a causal LM over the shared layers: AR decoding is greedy over
softcap(lm_head(encoder hidden state)), one single-token encoder forward per new token, on the same
continuous-batching AR engine as the other AR baselines (`models.ar_engine`, per-row KV slots). TPF = 1 by
construction; the cut at EOS / stop strings is the shared rule.
"""

from __future__ import annotations

from typing import Any

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, check_requests
from contract.text import Prompt
from models.ar_engine import AREngine
from models.causal_lm import CausalLM
from models.diffusion_gemma import DiffusionGemmaAdapter
from samplers.token_draw import TokenSampling


class DiffusionGemmaARDecoder:
    """Greedy AR decoding with a DiffusionGemma checkpoint's encoder; label "ar-same-weights"."""

    label = kind = DecoderKind.AR_SAME_WEIGHTS
    resumable = True  # greedy: a sample does not depend on its batch

    def __init__(self, **adapter_kwargs: Any):
        self.adapter = DiffusionGemmaAdapter(**adapter_kwargs)
        self.tokenizer = self.adapter.tokenizer
        lm = CausalLM(self.adapter.model, encoder=self.adapter.model.model.encoder)
        self.engine = AREngine(lm, self.tokenizer, self.adapter.eos_ids, TokenSampling())

    def encode(self, prompt: Prompt) -> list[int]:
        return self.adapter.encode(prompt)

    def describe(self) -> dict[str, Any]:
        mode = "DiffusionGemma causal encoder + LM head, greedy"
        return {**self.adapter.describe(), "decoder": str(self.label), "mode": mode, "engine": "continuous"}

    def stream(self, requests, batch_size: int):
        return self.engine.stream(requests, batch_size)

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        check_requests(requests)
        out = {r.sample_id: r for r in self.stream(requests, batch_size=max(1, len(requests)))}
        return [out[r.sample_id] for r in requests]
