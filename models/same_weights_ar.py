"""A diffusion checkpoint decoding autoregressively with its own weights ("ar-same-weights"): the shared decoder
surface. A subclass loads the checkpoint through its family's adapter (`self.adapter`), wraps its causal mode as a
`models.causal_lm.CausalLM` on the continuous-batching AR engine (`self.engine`) and names it (`self.mode`); this
class only forwards. Greedy only: TPF = 1 by construction, the cut at EOS / stop strings the shared rule.
"""

from __future__ import annotations

from typing import Any

from contract.decoding import DecoderKind
from contract.records import GenerationRequest, GenerationResult, check_requests
from contract.text import Prompt


class SameWeightsARDecoder:
    """`contract.decoding.Decoder` over a diffusion checkpoint's causal mode; subclasses set adapter, engine, mode."""

    label = kind = DecoderKind.AR_SAME_WEIGHTS
    resumable = True  # greedy: a sample does not depend on its batch
    adapter: Any
    engine: Any  # models.ar_engine.AREngine
    mode: str

    def encode(self, prompt: Prompt) -> list[int]:
        return self.adapter.encode(prompt)

    def describe(self) -> dict[str, Any]:
        return {**self.adapter.describe(), "decoder": str(self.label), "mode": self.mode, "engine": "continuous"}

    def stream(self, requests, batch_size: int):
        return self.engine.stream(requests, batch_size)

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        check_requests(requests)
        out = {r.sample_id: r for r in self.stream(requests, batch_size=max(1, len(requests)))}
        return [out[r.sample_id] for r in requests]
