"""The masked adapter's own knobs, checked before any model loads (harness.runner.configs) and again by the adapter
(`models.masked_diffusion`). torch-free, so a bad masked config fails in about a second (tests/test_fast_fail.py)."""

from __future__ import annotations

from typing import Any

ATTENTIONS = ("block_causal", "bidirectional")
CONTEXTS = ("recompute", "cache", "prefix_cache")
MASK_FORMS = ("additive", "bool")
# the adapter's own forward arguments: `forward_kwargs` may not set them
OWN_KWARGS = {"input_ids", "attention_mask", "position_ids", "past_key_values", "use_cache"}
OWN_KWARGS |= {"logits_to_keep", "num_logits_to_keep"}


def check_masked_model(
    attention: str,
    context: str,
    shifted_logits: bool,
    block_length: int | None = None,
    mask_form: str = "additive",
    forward_kwargs: Any = None,
) -> None:
    """The adapter's own knobs; run before loading (harness.runner.configs) and again by the adapter."""
    if mask_form not in MASK_FORMS:
        raise ValueError(f"model.mask_form: must be one of {MASK_FORMS}, got {mask_form!r}")
    if forward_kwargs is not None:
        if not hasattr(forward_kwargs, "keys") or not all(isinstance(k, str) for k in forward_kwargs):
            raise ValueError(f"model.forward_kwargs: must be a mapping of argument names, got {forward_kwargs!r}")
        if clash := sorted(OWN_KWARGS & set(forward_kwargs)):
            raise ValueError(f"model.forward_kwargs: {clash} are the adapter's own arguments")
    if attention not in ATTENTIONS:
        raise ValueError(f"model.attention: must be one of {ATTENTIONS}, got {attention!r}")
    if context not in CONTEXTS:
        raise ValueError(f"model.context: must be one of {CONTEXTS}, got {context!r}")
    if context == "cache" and attention != "block_causal":
        raise ValueError(
            "model.context=cache is exact only for block-causal models; a bidirectional model's prefix K/V change "
            "with every later token: use context=recompute, or context=prefix_cache (approximate, Fast-dLLM)"
        )
    if context == "prefix_cache" and attention != "bidirectional":
        raise ValueError("model.context=prefix_cache is the approximation for bidirectional models; use context=cache")
    if shifted_logits and context != "recompute":
        raise ValueError("model.shifted_logits: only with model.context=recompute (the cached paths run no prefix)")
    if block_length is not None and (not isinstance(block_length, int) or block_length < 1):
        raise ValueError(f"model.block_length: must be null or an integer >= 1, got {block_length!r}")
