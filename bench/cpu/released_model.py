"""The released DiffusionGemma 26B-A4B's text shapes, and that model built with random weights on a device.

`bench.gpu.gpu_check` measures it on a GPU; `bench.cpu.plan_twins` keeps its narrow twins at these counts; the memory
and
cache benches size real-shaped tensors from `FULL_TEXT`."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from models.tiny import TINY_VISION  # the vision tower is never run here: a tiny one saves ~0.5B

# google/diffusiongemma-26B-A4B-it text tower (Gemma 4 26B A4B): 30 layers (5 sliding : 1 full), 128 experts top-8,
# expert FFN 704 + shared dense FFN 2112, hidden 2816, 16 heads, KV heads 8 (sliding, head 256) / 2 (full, head 512).
FULL_TEXT = dict(
    vocab_size=262_144,
    hidden_size=2816,
    intermediate_size=2112,
    num_hidden_layers=30,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=256,
    global_head_dim=512,
    num_global_key_value_heads=2,
    num_experts=128,
    top_k_experts=8,
    moe_intermediate_size=704,
    sliding_window=1024,
    max_position_embeddings=262_144,
    final_logit_softcapping=30.0,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)


def model_config(tiny: bool):
    from transformers import DiffusionGemmaConfig

    if tiny:
        from models.tiny import diffusion_config

        return diffusion_config(112, canvas_length=16)
    return DiffusionGemmaConfig(
        text_config=FULL_TEXT,
        vision_config=TINY_VISION,
        canvas_length=256,
        boi_token_id=255_999,
        eoi_token_id=258_882,
        image_token_id=258_880,
    )


@contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(config, device: str, dtype: torch.dtype):
    """Random weights created and initialised directly on `device` (no CPU copy of 50 GB)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    with torch.device(device), default_dtype(dtype):
        model = DiffusionGemmaForBlockDiffusion(config)
    return model.eval()


def make_adapter(model, tokenizer, eos_ids: list[int]):
    """A DiffusionGemmaAdapter over the in-memory random model."""
    from models.diffusion_gemma import DiffusionGemmaAdapter

    return DiffusionGemmaAdapter.from_model(
        model, tokenizer, name="diffusiongemma-26B-A4B-shape-random", eos_token_ids=eos_ids
    )
