"""A diffusion checkpoint decoding autoregressively with its own weights ("ar-same-weights"): the shared adapter
surface. A subclass loads the checkpoint through its family's adapter (`self.adapter`), wraps its causal mode as a
`models.causal_lm.CausalLM` (`self.target`) and names it (`self.mode`); the AR families' engine
(`harness.engine.ar`) decodes it. Greedy only: TPF = 1 by construction, the cut at EOS / stop strings the shared rule.
"""

from __future__ import annotations

from typing import Any

from contract.decoding import DecoderKind
from contract.text import Prompt
from samplers.token_draw import TokenSampling


class SameWeightsARDecoder:
    """The AR-mode adapter over a diffusion checkpoint; subclasses set adapter, target, mode."""

    label = kind = DecoderKind.AR_SAME_WEIGHTS
    resumable = True  # every random number is keyed by (sample seed, position): batch-invariant
    adapter: Any
    target: Any  # models.causal_lm.CausalLM over the checkpoint's causal mode
    mode: str

    @property
    def tokenizer(self):
        return self.adapter.tokenizer

    @property
    def eos_ids(self) -> list[int]:
        return sorted(self.adapter.eos_ids)

    def new_drafter(self, sampling: TokenSampling) -> None:
        return None

    def encode(self, prompt: Prompt) -> list[int]:
        return self.adapter.encode(prompt)

    def describe(self) -> dict[str, Any]:
        return {**self.adapter.describe(), "decoder": str(self.label), "mode": self.mode, "engine": "continuous"}
