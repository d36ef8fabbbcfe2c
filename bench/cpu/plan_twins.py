"""The narrow twins that `bench.gpu.gpu_plan`'s profile traces: DiffusionGemma 26B-A4B and Gemma 4's causal LM at the
released op counts and per-op shapes but small widths, so one real forward runs on the CPU in seconds.

`bench.gpu.plan_profile` traces them; `bench.cpu.cache_copies` and `tests/test_batch_invariance.py` build on them too.
"""

from __future__ import annotations

from typing import Any

import torch

# The twin: every dimension that sets op counts or per-op shapes at real scale is the released one (layers and
# their 5:1 pattern, experts and top-k, heads, K/V heads, head dims, vocabulary, canvas); the widths that only
# scale matmuls are small and distinct from every other dimension (so a traced dimension names its width).
TWIN = dict(hidden=72, intermediate=88, moe=40, sliding_window=24, context=37)
# transformers' own loops (generate()) have no vocabulary-dependent blocking: their twins use a small
# vocabulary (rescaled like a width), which keeps the CPU's softmax / sampling over the logits short
HF_VOCAB = 3000


def twin_text(vocab: int | None = None) -> dict[str, Any]:
    from bench.cpu.released_model import FULL_TEXT

    return dict(
        FULL_TEXT,
        vocab_size=vocab or FULL_TEXT["vocab_size"],
        hidden_size=TWIN["hidden"],
        intermediate_size=TWIN["intermediate"],
        moe_intermediate_size=TWIN["moe"],
        sliding_window=TWIN["sliding_window"],
    )


def build_twin(dtype: torch.dtype = torch.bfloat16, vocab: int | None = None, text: dict | None = None):
    """The DiffusionGemma twin (random weights, CPU, bf16 like the GPU run) and its adapter (`text`: overrides of
    the twin's text config)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from bench.cpu.released_model import default_dtype
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import TINY_VISION, char_tokenizer

    text = {**twin_text(vocab), **(text or {})}
    v = text["vocab_size"]
    cfg = DiffusionGemmaConfig(
        text_config=text,
        vision_config=TINY_VISION,
        canvas_length=256,
        boi_token_id=255_999 if vocab is None else v - 3,
        eoi_token_id=258_882 if vocab is None else v - 2,
        image_token_id=258_880 if vocab is None else v - 1,
    )
    torch.manual_seed(0)
    with torch.device("cpu"), default_dtype(dtype):
        model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    return DiffusionGemmaAdapter.from_model(model, char_tokenizer(), name="gpu-plan-twin", eos_token_ids=[1])


def build_gemma4_twin(dtype: torch.dtype = torch.bfloat16, vocab: int | None = HF_VOCAB):
    """Gemma 4 26B-A4B's causal LM at the same twin widths (the AR baseline's model class)."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    from bench.cpu.released_model import default_dtype

    text = twin_text(vocab)
    cfg = Gemma4TextConfig(
        **text,
        enable_moe_block=True,
        attention_k_eq_v=True,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=text["vocab_size"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cpu"), default_dtype(dtype):
        return Gemma4ForCausalLM(cfg).eval()


def build_twins() -> dict[str, Any]:
    """The three twins: DiffusionGemma at the real vocabulary (its denoise blocks by it), the same at a small
    vocabulary (commits, AR steps, generate()), and Gemma 4's causal LM (small vocabulary)."""
    return {"adapter": build_twin(), "small": build_twin(vocab=HF_VOCAB), "gemma4": build_gemma4_twin()}
