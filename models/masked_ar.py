"""A masked block-diffusion checkpoint decoding autoregressively: the same weights, their causal mode.

Nemotron-Labs-Diffusion is trained for AR and block diffusion at once: its `encoder` body with causal attention and
its `diffusion_head` are an ordinary causal LM (its own `ar_generate`: a causal prefill, then one single-token
forward per new token over the KV cache, greedy or sampled). This decoder loads the checkpoint through
`models.masked_diffusion.MaskedDiffusionAdapter` (the same yaml keys: remote code, `module_attrs` that put every
attention in its causal mode) and runs the body and head on the continuous-batching AR engine of the other AR
baselines (`harness.engine.ar`, per-row KV slots). TPF = 1 by construction; the cut at EOS / stop strings is the
shared rule. Greedy only (as `models.diffusion_gemma_ar`).
"""

from __future__ import annotations

from typing import Any

import torch

from models.causal_lm import CausalLM
from models.masked_diffusion import MaskedDiffusionAdapter
from models.same_weights_ar import SameWeightsARDecoder


class MaskedARDecoder(SameWeightsARDecoder):
    """Greedy AR decoding of a masked checkpoint's causal body (`body`) and head (`head`); "ar-same-weights"."""

    def __init__(self, body: str = "encoder", head: str = "diffusion_head", **adapter_kwargs: Any):
        self.adapter = MaskedDiffusionAdapter(**adapter_kwargs)
        model = self.adapter.model
        for key, name in (("body", body), ("head", head)):
            if not isinstance(getattr(model, name, None), torch.nn.Module):
                raise ValueError(f"model.{key}: {type(model).__name__} has no submodule {name!r}")
        self.body, self.head, self.mode = body, head, f"causal {body} + {head}, greedy"
        self.target = CausalLM(model, encoder=getattr(model, body), head=getattr(model, head))
