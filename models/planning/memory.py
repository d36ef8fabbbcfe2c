"""Estimate a decode run's peak accelerator memory from the model config alone, and pick the batch size.

Why: the 26B DiffusionGemma (~50 GB in bf16) leaves ~30 GB of an 80 GB GPU for the KV cache, logits (~8.6 GB at batch
32) and activations; a run would OOM after minutes of loading. All comes from a `transformers` config (the model built
on `meta` to count parameters: no weights, no download beyond `config.json`): a bad batch fails in about a second.

What the estimate covers, for the continuous-batching engine in `harness/engine/decode.py` (admit rows: prefill ->
every step: denoise -> draw; a stopped canvas commits) over transformers 5.x' modules (`estimate_decode_peak`):
- weights: parameters x dtype bytes, tied weights once (encoder and decoder share every text weight);
- KV cache: the DynamicCache the encoder fills; sliding layers keep their last `window - 1` tokens as a
  *view* of the last concatenation, which pins its whole storage: the whole prompt after the prefill,
  `window - 1 + C` after a commit (measured in tests/test_memory.py);
- logits: the engine's float32 B x C x V workspace and its extras (`logits_factor`, 1.5 by default), plus
  a few C x V rows of the adapter's row-at-a-time self-conditioning and LM head;
- activations: one layer's worst moment (hidden stream + masks + the largest of MoE, dense MLP and
  attention), each part an upper bound checked against measured peaks on a small real model.
The peak is the largest of three phases: a denoising step at the full context, the prefill of the longest
prompt (its MoE rows dominate for long prompts and large batches), and a commit (which copies K/V rows).
Not covered: the CUDA context (already outside `mem_get_info`'s free figure), allocator fragmentation and
workspaces (the `headroom` factor leaves 10% for those), `experts_implementation="batched_mm"` (which gathers one
weight matrix per token-expert pair and needs far more), multi-GPU `device_map` sharding. torch and transformers
are imported lazily, inside the functions that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1 << 30

# Bytes per element of the model dtypes the harness accepts (`model.dtype`).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated peak bytes of one decode run, split by what holds them (total = the sum)."""

    weights: int
    kv_cache: int
    logits: int
    activations: int
    total: int
    batch_size: int
    context_tokens: int
    phase: str  # the phase that peaks: "decode", "prefill" or "commit" (see `estimate_decode_peak`)
    rows: int | None = None  # rows computed, where more than the batch (a compiled step's bucket)

    def describe(self) -> str:
        g = _gib
        rows = f" (a compiled step computes {self.rows} rows)" if self.rows and self.rows != self.batch_size else ""
        return (
            f"{g(self.total)} GiB peak at {self.phase} for batch_size={self.batch_size}{rows}, "
            f"context {self.context_tokens} tokens (weights {g(self.weights)} + KV cache {g(self.kv_cache)} "
            f"+ logits {g(self.logits)} + activations {g(self.activations)} GiB)"
        )


@dataclass(frozen=True)
class _Layer:
    """One attention layer's cache shape: bytes per cached token and row (K and V), and its sliding window."""

    kv_bytes: int  # 2 * kv_heads * head_dim * dtype bytes
    kv_heads: int
    head_dim: int
    window: int | None  # None for a full-attention layer


# ---------------------------------------------------------------------------------------------- config


def load_config(path_or_hub_id: str, revision: str | None = None, trust_remote_code: bool = False):
    """The model's `transformers` config: a local folder works offline, a hub id when cached (or online); a remote
    config class (`auto_map`) only where the model yaml trusts remote code."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path_or_hub_id, revision=revision, trust_remote_code=trust_remote_code)


def text_config_of(config):
    """The decoder-side text config of a composite config (DiffusionGemma, Gemma 4), or the config itself."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def dtype_bytes_of(dtype: str, config=None) -> int:
    """Bytes per weight element for `model.dtype`; "auto" reads the config's `dtype` (float32 if unset)."""
    if dtype == "auto":
        d = None
        if config is not None:
            d = getattr(config, "dtype", None) or getattr(text_config_of(config), "dtype", None)
        dtype = str(d).replace("torch.", "") if d is not None else "float32"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype: expected one of {sorted(DTYPE_BYTES)} or 'auto', got {dtype!r}")
    return DTYPE_BYTES[dtype]


def _build_on_meta(config, auto_class: str = "causal_lm", trust_remote_code: bool = False):
    """The model `config` describes, built on `meta` (no memory); remote code gets the 4.x names it imports."""
    import torch

    from models.compat import remote_compat

    if trust_remote_code:
        remote_compat.apply()
    with torch.device("meta"):
        if getattr(config, "model_type", None) == "diffusion_gemma":
            from transformers import DiffusionGemmaForBlockDiffusion

            return DiffusionGemmaForBlockDiffusion(config)
        from transformers import AutoModel, AutoModelForCausalLM

        base_only = "AutoModel" in (m := getattr(config, "auto_map", None) or {}) and "AutoModelForCausalLM" not in m
        auto = AutoModel if auto_class == "model" or base_only else AutoModelForCausalLM
        return auto.from_config(config, trust_remote_code=trust_remote_code)


def count_parameters(config, auto_class: str = "causal_lm", trust_remote_code: bool = False) -> int:
    """Parameters of the model `config` describes, tied weights counted once (`_build_on_meta`: no memory).
    DiffusionGemma's encoder and decoder share all text weights and its LM head is the embedding."""
    model = _build_on_meta(config, auto_class, trust_remote_code)
    # `parameters()` yields each Parameter object once, so tied weights (the same object) count once.
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------- KV cache


def _layers(text_config, dtype_bytes: int) -> list[_Layer]:
    """Cache shape of every layer that stores K/V, in the order DynamicCache builds them.

    Head dims and KV heads come from `per_layer_config` (transformers 5 turns DiffusionGemma's and Gemma 4's
    `global_head_dim` / `num_global_key_value_heads` into per-layer overrides of the full-attention layers);
    configs without it fall back to `global_head_dim` / `num_global_key_value_heads` attributes.
    """
    n = text_config.num_hidden_layers
    try:  # the same layer typing DynamicCache(config=...) uses (KV-sharing consumers become "dummy": no cache)
        from transformers.cache_utils import get_layer_types_and_kwargs

        types, _ = get_layer_types_and_kwargs(text_config)
    except (ImportError, AttributeError):
        types = list(getattr(text_config, "layer_types", None) or ["full_attention"] * n)
    per_layer = getattr(text_config, "per_layer_config", None)
    out = []
    for i, kind in enumerate(types):
        if kind == "dummy":
            continue
        lc = per_layer[i] if per_layer is not None else text_config
        heads = lc.num_attention_heads
        head_dim = getattr(lc, "head_dim", None) or lc.hidden_size // heads
        kv_heads = getattr(lc, "num_key_value_heads", None) or heads
        sliding = kind in ("sliding_attention", "chunked_attention")
        if not sliding and per_layer is None:
            head_dim = getattr(lc, "global_head_dim", None) or head_dim
            kv_heads = getattr(lc, "num_global_key_value_heads", None) or kv_heads
        window = (getattr(lc, "sliding_window", None) or getattr(lc, "attention_chunk_size", None)) if sliding else None
        # K and V are both cached, also in DiffusionGemma's K=V full layers (V is a separate normed tensor).
        out.append(_Layer(2 * kv_heads * head_dim * dtype_bytes, kv_heads, head_dim, window))
    return out


def kv_bytes_per_token(text_config, dtype_bytes: int) -> tuple[int, int, int | None]:
    """(full-layer bytes, sliding-layer bytes, sliding window): K+V bytes per cached token of one row,
    summed over the full-attention layers and over the sliding-window layers (which hold at most
    `sliding_window` tokens each). Pass `text_config_of(config)` for a composite config."""
    layers = _layers(text_config, dtype_bytes)
    full = sum(layer.kv_bytes for layer in layers if layer.window is None)
    sliding = sum(layer.kv_bytes for layer in layers if layer.window is not None)
    windows = {layer.window for layer in layers if layer.window is not None}
    return full, sliding, max(windows) if windows else None


def sliding_storage_tokens(window: int, context_tokens: int, canvas_length: int) -> int:
    """Slots a sliding layer holds per row in the slot cache (`models.cache.slot_cache`): a ring of `window - 1` plus
    one chunk (the canvas, which prompts are encoded in as well), never more than the context and a chunk."""
    return min(context_tokens, window - 1) + canvas_length


def kv_cache_bytes(
    text_config,
    batch_size: int,
    context_tokens: int,
    canvas_length: int,
    dtype_bytes: int,
    chunk: int | None = None,
) -> int:
    """Bytes of the slot cache: full layers hold the context plus the canvas written after it, sliding layers
    `sliding_storage_tokens` (what the prompt is does not matter: the slots are preallocated). `chunk`: the most
    positions one forward writes per row (default the canvas; 2C where a commit folds into a compiled step)."""
    chunk = chunk or canvas_length
    per_row = 0
    for layer in _layers(text_config, dtype_bytes):
        if layer.window is None:
            tokens = context_tokens + chunk
        else:
            tokens = sliding_storage_tokens(layer.window, context_tokens, chunk)
        per_row += layer.kv_bytes * tokens
    return batch_size * per_row


# ---------------------------------------------------------------------------------------------- activations


def _score_bytes(dtype_bytes: int) -> int:
    """Eager attention: the scores in the model dtype, their float32 softmax and its cast back, alive at once."""
    return 8 if dtype_bytes == 4 else 2 * dtype_bytes + 4


def forward_activation_bytes(
    text_config,
    batch_size: int,
    query_tokens: int,
    cached_tokens: int,
    dtype_bytes: int,
    attn_implementation: str = "sdpa",
    sliding_cached_tokens: int | None = None,
) -> int:
    """Upper bound on the transient bytes of one forward over `query_tokens` per row, `cached_tokens` cached.

    Layers run one at a time and free their temporaries, so this is one layer's worst moment (N = B x q rows):
    - always alive: the hidden stream (embeddings / self-conditioning input, layer input, residual, branch
      outputs: 6 model-dtype N x hidden tensors, plus 3 float32 ones for RMSNorm's upcast), the float32
      rotary cos / sin per layer type, and the full + sliding attention masks (bool for SDPA, additive
      model-dtype for eager), B x q x keys each;
    - plus the largest of three sub-blocks, each bounded on its own (checked against measured peaks in
      tests/test_memory.py):
      - MoE, `grouped_mm` (transformers' default; the eager loop needs less): S = N x top_k gathered rows;
        the gathered input, the down projection, and the routing-weighted output and its re-ordered copy,
        which are float32 because the router weights are (S x hidden x (2 dtype + 8) bytes), or the up
        projection's S x (hidden + 4 moe_intermediate); plus float32 router probabilities;
      - the dense MLP: gate, up, act(gate), product: 4 N x intermediate;
      - attention, the largest layer type: q and its normed / rotated copy, the new K/V, their concatenation
        with the cache (the decoder's `append_to_cache`, the encoder's cache update), K/V repeated to all
        query heads (`repeat_kv`: eager, and SDPA whenever a mask is passed), the output and its transposed
        copy; eager also materialises B x heads x q x keys scores (`_score_bytes` each), SDPA does not.
    `experts_implementation="triton"` (`models.kernels.fused_moe`) holds S x (moe_intermediate + hidden) model-dtype
    tensors, less than grouped_mm, so the bound covers it; `"batched_mm"` gathers a weight matrix per token-expert
    pair and is not covered.
    """
    tc = text_config
    b, q = batch_size, query_tokens
    n = b * q
    h = tc.hidden_size
    layers = _layers(tc, dtype_bytes)
    full_keys = cached_tokens + q
    mask_bytes = 1 if attn_implementation != "eager" else dtype_bytes
    rotary = 2 * 2 * n * max(layer.head_dim for layer in layers) * 4  # float32 cos and sin per layer type
    stream = n * h * (6 * dtype_bytes + 3 * 4) + rotary + 2 * b * q * full_keys * mask_bytes
    mlp = 4 * n * (getattr(tc, "intermediate_size", None) or tc.mlp_hidden_size) * dtype_bytes  # LLaDA: mlp_hidden_size
    moe = 0
    experts = getattr(tc, "num_experts", None) or 0
    top_k = getattr(tc, "top_k_experts", None) or getattr(tc, "num_experts_per_tok", None) or 0  # Gemma | LLaDA 2.x
    if experts and top_k:
        s = n * top_k
        moe = s * max(h * (2 * dtype_bytes + 8), (h + 4 * tc.moe_intermediate_size) * dtype_bytes)
        moe += n * experts * (4 + dtype_bytes)
    heads = tc.num_attention_heads
    attn = 0
    for layer in layers:
        cached = cached_tokens if layer.window is None or sliding_cached_tokens is None else sliding_cached_tokens
        keys = cached + q
        qo = 2 * n * heads * layer.head_dim * dtype_bytes  # q + its normed/rotated copy; output + its transposed copy
        a = 2 * qo + 2 * n * layer.kv_bytes + b * keys * layer.kv_bytes
        if layer.kv_heads < heads:
            a += 2 * b * heads * keys * layer.head_dim * dtype_bytes  # repeat_kv
        if attn_implementation == "eager":
            a += b * heads * q * keys * _score_bytes(dtype_bytes)
        attn = max(attn, a)
    return stream + max(attn, mlp, moe)


# ---------------------------------------------------------------------------------------------- the estimate

# C x V float32 rows on top of the B-scaled logits. The self-conditioning and the LM head run over all rows'
# positions in blocks sized as a share of U (`models.kernels.logits_blocks`), inside logits_factor; what the draw holds
# per block besides them peaks at about 0.6 rows (tests/test_memory.py, the whole engine at B=4): 2 rows cover it.
ROW_LOGITS_BUFFERS = 2

# The commit re-encodes a canvas into its rows' own slots (`models.cache.slot_cache`): no copy of the cache is alive.
# (A commit by more than a few scattered rows gathers their K/V one layer at a time: an activation, counted in
# `forward_activation_bytes`.)
COMMIT_KV_COPIES = 0.0


def estimate_decode_peak(
    config,
    batch_size: int,
    context_tokens: int,
    canvas_length: int | None,
    dtype_bytes: int,
    logits_factor: float = 1.5,
    *,
    prompt_tokens: int | None = None,
    attn_implementation: str = "sdpa",
    parameters: int | None = None,
    whole_step: bool = False,
) -> MemoryEstimate:
    """Estimated peak bytes of decoding `batch_size` rows up to `context_tokens` (longest prompt + max new tokens).

    Terms (U = one float32 B x C x V tensor, 8 GiB at B=32 for the 26B model):
    - weights = parameters x dtype_bytes (`count_parameters`; pass `parameters` to skip the meta build);
    - kv_cache = `kv_cache_bytes`: the slot cache (full layers: context + C; sliding layers: a ring);
    - logits = logits_factor x U + ROW_LOGITS_BUFFERS x C x V x 4: the engine's float32 logits workspace (also
      the self-conditioning input) plus its batch-wide extras (`models.kernels.logits_blocks`), which the engine
      bounds to 1.5 U in all.
      A draw that materialises full-size temporaries needs more: `draw_whole` (x - max, its clamp, exp) holds
      ~2 U more (pass 3); transformers' own forward, as in `generate()`, ~4 U;
    - activations = `forward_activation_bytes`.
    The peak is the largest of three phases, all with the whole batch resident (continuous batching admits
    and commits rows while the others decode):
    - decode: one denoising step, C queries over context + C keys, logits = logits_factor x U;
    - prefill: the prompts (`prompt_tokens`, default the whole context: conservative) through the encoder
      at once, with the workspace (1 U) allocated;
    - commit: a canvas re-encoded into its rows' slots (`COMMIT_KV_COPIES` more caches alive: none).
    `attn_implementation="eager"` adds materialised attention scores (large for long prompts).
    `whole_step` (`model.compile=step`): a compiled step runs the power-of-two bucket of rows at or above the
    batch (`models.cache.slot_cache.bucket`; the padding rows are free rows it computes), so the cache, the logits
    and the activations are those of the bucket; its draw is `draw_whole` (pass logits_factor=3); a commit folds
    into its step, so a forward writes 2C positions per row (the cache's chunk: rings of window - 1 + 2C).
    """
    if batch_size < 1 or context_tokens < 1:
        raise ValueError(f"batch_size and context_tokens must be >= 1, got {batch_size} and {context_tokens}")
    tc = text_config_of(config)
    c = canvas_length or getattr(config, "canvas_length", None) or 1
    prompt = context_tokens if prompt_tokens is None else min(prompt_tokens, context_tokens)
    params = count_parameters(config) if parameters is None else parameters
    weights, b = params * dtype_bytes, batch_size
    if whole_step:
        from models.cache.slot_cache import bucket

        b = bucket(batch_size)
    row = c * tc.vocab_size * 4
    u = b * row
    kv = kv_cache_bytes(tc, b, context_tokens, c, dtype_bytes, 2 * c if whole_step else c)
    window = kv_bytes_per_token(tc, dtype_bytes)[2]
    sliding_keys = min(context_tokens, window - 1) if window else None
    step = forward_activation_bytes(tc, b, c, context_tokens, dtype_bytes, attn_implementation, sliding_keys)
    phases = {
        "decode": (kv, int(logits_factor * u) + ROW_LOGITS_BUFFERS * row, step),
        "prefill": (kv, u, forward_activation_bytes(tc, b, prompt, 0, dtype_bytes, attn_implementation)),
        "commit": (int(kv * (1 + COMMIT_KV_COPIES)), u, step),
    }
    name, (kv_p, logits_p, act_p) = max(phases.items(), key=lambda item: sum(item[1]))
    total = weights + kv_p + logits_p + act_p
    return MemoryEstimate(weights, kv_p, logits_p, act_p, total, batch_size, context_tokens, name, b)


# ---------------------------------------------------------------------------------------------- fitting


def free_memory_bytes(device: str) -> int:
    """Free bytes on `device`: CUDA from `torch.cuda.mem_get_info` (after the CUDA context), CPU from
    /proc/meminfo's MemAvailable (what can be allocated without swapping)."""
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    if kind == "cpu":
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("/proc/meminfo has no MemAvailable line")
    raise ValueError(f"free_memory_bytes: unsupported device {device!r} (expected 'cpu' or 'cuda[:N]')")


def _estimator(config, context_tokens, canvas_length, dtype_bytes, estimate_kwargs):
    """b -> the estimate at batch b: `estimate_kwargs["peak"]` (default `estimate_decode_peak`; the masked family's
    `models.planning.masked_memory.estimate_masked_peak`, canvas = its block) with the parameters counted once."""
    peak = estimate_kwargs.pop("peak", estimate_decode_peak)
    params = estimate_kwargs.pop("parameters", None)
    params = count_parameters(config) if params is None else params
    return lambda b: peak(config, b, context_tokens, canvas_length, dtype_bytes, parameters=params, **estimate_kwargs)


def _largest(estimate, budget: float, max_batch: int) -> int:
    """Largest b in [1, max_batch] whose estimate fits `budget` (0 if none); the estimate grows with b."""
    if max_batch < 1 or estimate(1).total > budget:
        return 0
    lo, hi = 1, max_batch  # invariant: lo fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(mid).total <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _too_big(est: MemoryEstimate, free_bytes: int, headroom: float, fits: int, what: str) -> ValueError:
    budget = f"{headroom:.0%} of the free {_gib(free_bytes)} GiB = {_gib(int(headroom * free_bytes))} GiB"
    if fits:
        advice = f"The largest batch size that fits is {fits}: set batch_size={fits} (or batch_size=auto)."
    else:
        advice = (
            f"Even batch_size=1 does not fit: the weights alone are {_gib(est.weights)} GiB. Use a device "
            f"with more memory, a smaller dtype, shard the model (model.device_map), or shorten the context."
        )
    return ValueError(f"{what}: estimated {est.describe()}; that exceeds {budget}. {advice}")


def check_batch_fits(
    config,
    batch_size: int,
    context_tokens: int,
    canvas_length: int | None,
    dtype_bytes: int,
    free_bytes: int,
    headroom: float = 0.9,
    max_batch: int | None = None,
    **estimate_kwargs: Any,
) -> MemoryEstimate:
    """Return the estimate if `batch_size` fits in `headroom` x `free_bytes`, else raise a ValueError that
    names batch_size, breaks the estimate down, and gives the largest batch size that fits (or says that
    even batch 1 does not, naming the weights). `estimate_kwargs` go to `estimate_decode_peak`."""
    estimate = _estimator(config, context_tokens, canvas_length, dtype_bytes, dict(estimate_kwargs))
    est = estimate(batch_size)
    budget = headroom * free_bytes
    if est.total <= budget:
        return est
    fits = _largest(estimate, budget, min(batch_size - 1, max_batch or batch_size - 1))
    raise _too_big(est, free_bytes, headroom, fits, f"batch_size={batch_size} does not fit in memory")


def largest_batch_that_fits(
    config,
    context_tokens: int,
    canvas_length: int | None,
    dtype_bytes: int,
    free_bytes: int,
    max_batch: int,
    headroom: float = 0.9,
    **estimate_kwargs: Any,
) -> int:
    """For `batch_size=auto`: the largest batch size <= max_batch whose estimate fits in `headroom` x
    `free_bytes` (binary search; the estimate grows with the batch). Raises the `check_batch_fits` error
    when not even batch 1 fits."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    estimate = _estimator(config, context_tokens, canvas_length, dtype_bytes, dict(estimate_kwargs))
    fits = _largest(estimate, headroom * free_bytes, max_batch)
    if not fits:
        raise _too_big(estimate(1), free_bytes, headroom, 0, "batch_size=auto: no batch size fits in memory")
    return fits
