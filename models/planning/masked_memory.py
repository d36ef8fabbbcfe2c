"""The masked family's peak-memory estimate (`batch_size=auto` for `harness.engine.masked`), from the model config
alone, on the terms of `models.planning.memory` (weights, K/V, logits, one layer's activations).

torch and transformers are imported lazily, inside the functions that need them.
"""

from __future__ import annotations

from models.planning.memory import (
    MemoryEstimate,
    _build_on_meta,
    _layers,
    count_parameters,
    forward_activation_bytes,
    text_config_of,
)

# float32 B x L x V tensors alive at once in `samplers.masked.draw` and `remask`, over the model's own logits:
# greedy: the float copy and its softmax; sampled: also the temperature-scaled and filtered copies and the float64
# CDF (2 U), which the top-p sort's values and int64 indices (3 U) can exceed; counted from the code, bounded
# against LiveBytes on the CPU in tests/test_memory.py.
MASKED_DRAW_FACTOR = {"greedy": 2.0, "sampled": 6.0}


def row_cache_slots(first_need: int, need: int, step: int) -> int:
    """Slots per row the masked engine's K/V buffers (`models.cache.row_cache`) grow to: they start at the first step's
    need (at least 64); as the need grows by `step` (a block) they double, or jump to the need, when it passes them."""
    cap = max(first_need, 64)
    for n in range(first_need, need + step, step):
        if min(n, need) > cap:
            cap = max(min(n, need), 2 * cap)
    return cap


def estimate_masked_peak(
    config,
    batch_size: int,
    context_tokens: int,
    block_length: int,
    dtype_bytes: int,
    *,
    prompt_tokens: int | None = None,
    context: str = "cache",
    sampled: bool = False,
    trims_logits: bool = False,
    attn_implementation: str = "sdpa",
    parameters: int | None = None,
) -> MemoryEstimate:
    """Estimated peak bytes of the masked block loop (`harness.engine.masked` over `models.masked_diffusion`),
    `batch_size` rows up to `context_tokens` (prompt + max new tokens, rounded up to the block: blocks are aligned
    at position 0). V = vocabulary, L = `block_length`, U = one float32 B x L x V tensor.

    - weights = parameters x dtype bytes;
    - kv_cache (`context="cache"` / `"prefix_cache"`): K and V of every layer for every slot of `row_cache_slots`
      (all layers keep all positions: the 4D mask, not the cache, windows a layer), plus one layer's buffers
      copied while they grow; none on the recompute path;
    - logits: the model's logits in its dtype (L columns with `trims_logits`, the model's forward taking
      `logits_to_keep` (`trims_lm_head`); else every query column) plus the draw's `MASKED_DRAW_FACTOR` x U;
    - activations: one layer's worst moment (`forward_activation_bytes`) plus the 4D mask (bool, its additive
      copy in the model dtype, and the boolean temporaries that build it: B x Q x K x (3 + dtype bytes)).
    Phases: `prefill` (the cached paths' first step: the prompt's whole blocks + L queries, nothing cached) and
    `decode` (a step: 2L queries at a block's first step, over the whole context). On the recompute path every step
    runs the row's whole prefix: one phase, `decode`, of `context_tokens` queries with nothing cached."""
    if batch_size < 1 or context_tokens < 1:
        raise ValueError(f"batch_size and context_tokens must be >= 1, got {batch_size} and {context_tokens}")
    tc = text_config_of(config)
    b, L, v = batch_size, block_length, tc.vocab_size
    prompt = context_tokens if prompt_tokens is None else min(prompt_tokens, context_tokens)
    params = count_parameters(config) if parameters is None else parameters
    weights = params * dtype_bytes
    layers = _layers(tc, dtype_bytes)
    draw = int(MASKED_DRAW_FACTOR["sampled" if sampled else "greedy"] * b * L * v * 4)

    def forward(queries: int, cached: int) -> tuple[int, int]:
        """(logits, activations) of one forward: its logits (model dtype) + the draw, one layer, the mask."""
        keys = cached + queries
        mask = b * queries * keys * (3 + dtype_bytes)
        act = forward_activation_bytes(tc, b, queries, cached, dtype_bytes, attn_implementation) + mask
        return b * (L if trims_logits else queries) * v * dtype_bytes + draw, act

    if context == "recompute":
        logits, act = forward(context_tokens, 0)
        return MemoryEstimate(weights, 0, logits, act, weights + logits + act, b, context_tokens, "decode")
    first = prompt // L * L + L
    slots = row_cache_slots(first, context_tokens + L, L)
    per_slot = sum(layer.kv_bytes for layer in layers)
    kv = b * per_slot * slots + 2 * b * max(layer.kv_bytes for layer in layers) * slots
    phases = {"prefill": forward(first, 0), "decode": forward(2 * L, context_tokens)}
    name, (logits, act) = max(phases.items(), key=lambda item: sum(item[1]))
    return MemoryEstimate(weights, kv, logits, act, weights + kv + logits + act, b, context_tokens, name)


def trims_lm_head(config, auto_class: str = "causal_lm", trust_remote_code: bool = False) -> bool:
    """Whether the model's forward takes `logits_to_keep` / `num_logits_to_keep`: the masked adapter then runs its LM
    head on a block's columns only (`models.masked_diffusion`), else on every query column."""
    import inspect

    params = inspect.signature(_build_on_meta(config, auto_class, trust_remote_code).forward).parameters
    return "logits_to_keep" in params or "num_logits_to_keep" in params
