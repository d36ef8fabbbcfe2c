"""The shape of one decode step per family, for the memory estimate (`harness.runner.batch_plan`).

Each function answers for one family (named in `contract.families`): how many positions a row's forward holds
(`canvas`), how many positions a row holds when its answer is done (`context`), and what else its estimate needs.
They read the model config the checkpoint ships (`config`, a transformers config) and import torch only lazily.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig


@dataclass(frozen=True)
class DecodeShape:
    canvas: int  # positions each row's forward computes logits for
    context: int  # positions a row holds at its end (prompt + answer, rounded up to whole canvases)
    estimate: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the family's memory estimate


@dataclass(frozen=True)
class ShapeInputs:
    model: DictConfig  # cfg.model
    sampler: Any  # the instantiated sampler config (the AR families: their token rule)
    config: Any  # the checkpoint's transformers config
    prompt_tokens: int  # the longest prompt
    max_new_tokens: int


def _appended(inputs: ShapeInputs, canvas: int) -> int:
    """Canvases appended after the prompt (AR, AR + draft, uniform-state diffusion)."""
    return inputs.prompt_tokens + -(-inputs.max_new_tokens // canvas) * canvas


def block_diffusion(inputs: ShapeInputs) -> DecodeShape:
    canvas = inputs.sampler.canvas_length or inputs.config.canvas_length
    estimate = {"whole_step": True, "logits_factor": 3.0} if inputs.model.get("compile") == "step" else {}
    return DecodeShape(canvas, _appended(inputs, canvas), estimate)  # compile=step: a bucket of rows at once


def autoregressive(inputs: ShapeInputs) -> DecodeShape:
    return DecodeShape(1, _appended(inputs, 1))


def assisted(inputs: ShapeInputs) -> DecodeShape:
    """The target verifying k + 1 positions per row (the drafter's weights and cache are small next to it)."""
    canvas = int(inputs.model.get("num_draft_tokens", 4)) + 1
    return DecodeShape(canvas, _appended(inputs, canvas))


def masked(inputs: ShapeInputs) -> DecodeShape:
    """A block of L per step, blocks aligned at position 0 (Dream: the whole answer is one block)."""
    from models.planning import masked_memory, memory

    model, config = inputs.model, inputs.config
    canvas = inputs.sampler.block_length or model.get("block_length")
    canvas = canvas or getattr(config, "block_length", None) or getattr(config, "block_size", None)
    canvas = inputs.max_new_tokens if canvas == "answer" else int(canvas)
    auto_class, remote = str(model.get("auto_class", "causal_lm")), bool(model.get("trust_remote_code"))
    estimate = {
        "peak": masked_memory.estimate_masked_peak,
        "context": str(model.get("context", "recompute")),
        "sampled": inputs.sampler.temperature > 0,
        "parameters": memory.count_parameters(config, auto_class, remote),
        "trims_logits": masked_memory.trims_lm_head(config, auto_class, remote),
    }
    context = -(-(inputs.prompt_tokens + inputs.max_new_tokens) // canvas) * canvas
    return DecodeShape(canvas, context, estimate)
