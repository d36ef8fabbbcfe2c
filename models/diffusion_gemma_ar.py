"""The third baseline: the DiffusionGemma weights decoding autoregressively (no training difference at all).

The checkpoint's causal encoder is a causal LM over the shared layers: AR decoding is greedy over
softcap(lm_head(encoder hidden state)), one single-token encoder forward per new token, on the same
continuous-batching AR engine as the other AR baselines (`harness.engine.ar`, per-row KV slots). TPF = 1 by
construction; the cut at EOS / stop strings is the shared rule.
"""

from __future__ import annotations

from typing import Any

from models.causal_lm import CausalLM
from models.diffusion_gemma import DiffusionGemmaAdapter
from models.same_weights_ar import SameWeightsARDecoder


class DiffusionGemmaARDecoder(SameWeightsARDecoder):
    """Greedy AR decoding with a DiffusionGemma checkpoint's encoder; label "ar-same-weights"."""

    mode = "DiffusionGemma causal encoder + LM head, greedy"

    def __init__(self, **adapter_kwargs: Any):
        self.adapter = DiffusionGemmaAdapter(**adapter_kwargs)
        self.target = CausalLM(self.adapter.model, encoder=self.adapter.model.model.encoder)
