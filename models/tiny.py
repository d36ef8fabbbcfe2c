"""Build tiny, random DiffusionGemma / Gemma checkpoints and a character tokenizer, offline.

Tests and the CPU default need real `transformers` models without any download: these builders make
them from configs, save them with `save_pretrained`, and everything then loads them through the same
`from_pretrained` path as a hub id.
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    DiffusionGemmaConfig,
    DiffusionGemmaForBlockDiffusion,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIALS = [PAD, EOS, BOS, UNK, "<start_of_turn>", "<end_of_turn>"]
# Printable ASCII minus the vertical-tab/form-feed noise: enough for prompts, digits and code.
CHARS = [c for c in string.printable if c not in "\x0b\x0c\r"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n"
    # as Gemma 4: thinking off (enable_thinking=false) opens the reply with an empty thought block
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>\n{% endif %}{% endif %}"
)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: ids 0..5 are specials (pad, eos, bos, unk, turn markers)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Tokenizer, **special_tokens: str) -> PreTrainedTokenizerFast:
    """A `tokenizers` object with the char tokenizer's specials as a transformers tokenizer (left padding, the
    Gemma-style chat template); `special_tokens` adds more (`mask_token=MASK`)."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        additional_special_tokens=SPECIALS[4:],
        padding_side="left",
        **special_tokens,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def vocab_size_for(tokenizer) -> int:
    """Round the tokenizer size up to a multiple of 8, leaving room for the 3 image ids at the top."""
    n = len(tokenizer) + 3
    return (n + 7) // 8 * 8


# A one-layer vision tower: `vision_config=None` would silently build the full 167M-parameter default tower.
TINY_VISION = dict(
    model_type="gemma4_vision",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=1,
    num_key_value_heads=1,
    head_dim=16,
    patch_size=4,
    position_embedding_size=16,
    pooling_kernel_size=1,
)


def _gemma4_text(
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    head_dim: int,
    intermediate: int,
    max_position: int,
    sliding_window: int,
) -> dict:
    """The Gemma 4 text-model fields both tiny configs share: sliding and full attention alternating (the last
    layer full), one K/V head, the global head size equal to the local one, the specials' ids."""
    layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers - 1)]
    return dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        layer_types=[*layer_types, "full_attention"],
        num_attention_heads=heads,
        num_key_value_heads=1,
        head_dim=head_dim,
        global_head_dim=head_dim,
        num_global_key_value_heads=1,
        sliding_window=sliding_window,
        max_position_embeddings=max_position,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def diffusion_config(
    vocab_size: int,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    head_dim: int = 32,
    intermediate: int = 128,
    canvas_length: int = 16,
    num_experts: int = 2,
    max_position: int = 4096,
    sliding_window: int = 128,
) -> DiffusionGemmaConfig:
    """Smallest DiffusionGemma config that builds (see shared/NOTES.md): tiny vision tower, MoE >= 1 expert."""
    text = dict(
        **_gemma4_text(vocab_size, hidden, layers, heads, head_dim, intermediate, max_position, sliding_window),
        num_experts=num_experts,
        top_k_experts=1,
        moe_intermediate_size=max(16, intermediate // 4),
    )
    return DiffusionGemmaConfig(
        text_config=text,
        vision_config=dict(TINY_VISION),
        canvas_length=canvas_length,
        boi_token_id=vocab_size - 3,
        eoi_token_id=vocab_size - 2,
        image_token_id=vocab_size - 1,
    )


def ar_config(
    vocab_size: int,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    head_dim: int = 32,
    intermediate: int = 128,
    max_position: int = 4096,
) -> Gemma4TextConfig:
    """A small Gemma 4 text (causal) config for the AR baseline and its draft model."""
    return Gemma4TextConfig(
        **_gemma4_text(vocab_size, hidden, layers, heads, head_dim, intermediate, max_position, sliding_window=128),
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=vocab_size,
        tie_word_embeddings=True,
    )


def build_diffusion(
    out_dir: str | Path, seed: int = 0, sharpen: float | None = None, vocab_size: int | None = None, **config_kwargs
) -> Path:
    """Save a random tiny DiffusionGemma checkpoint + char tokenizer under `out_dir`.

    `vocab_size` above the tokenizer's gives real-size logits (e.g. 262,144 for memory benches); the
    extra ids decode to nothing."""
    tok = char_tokenizer()
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(diffusion_config(vocab_size or vocab_size_for(tok), **config_kwargs))
    if sharpen:
        sharpen_to_copy(model, sharpen)
    return _save(model, tok, out_dir)


def build_ar(out_dir: str | Path, seed: int = 0, **config_kwargs) -> Path:
    """Save a random tiny Gemma 4 causal LM + char tokenizer under `out_dir`."""
    tok = char_tokenizer()
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(ar_config(vocab_size_for(tok), **config_kwargs))
    return _save(model, tok, out_dir)


MASK = "<|mask|>"


def build_masked(
    out_dir: str | Path, seed: int = 0, block_length: int = 4, attention: str = "block_causal", sharpen: float = 40.0
) -> Path:
    """Save a random tiny masked-diffusion LM: a native Llama causal-LM class with a `<|mask|>` token added, run
    with a block-causal (or bidirectional) 4D mask by `models.masked_diffusion`. `mask_token_id`, `block_length`
    and `attention` are written into its config. `sharpen` scales the final norm so confidences spread over
    (0, 1) (a random model's are all near 1 / vocab) and threshold rules have something to decide."""
    tok = char_tokenizer()
    tok.add_special_tokens({"mask_token": MASK})
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=(len(tok) + 7) // 8 * 8,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    cfg.mask_token_id, cfg.block_length, cfg.attention = tok.mask_token_id, block_length, attention
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
    return _save(model, tok, out_dir)


def _save(model, tok, out_dir) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("kind", choices=["diffusion", "ar", "masked"])
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--canvas-length", type=int, default=16)
    p.add_argument("--sharpen", type=float, default=None, help="make a confident copy-denoiser (diffusion only)")
    a = p.parse_args()
    if a.kind == "masked":
        print(build_masked(a.out_dir, seed=a.seed, block_length=8))
    elif a.kind == "diffusion":
        print(build_diffusion(a.out_dir, seed=a.seed, sharpen=a.sharpen, canvas_length=a.canvas_length))
    else:
        print(build_ar(a.out_dir, seed=a.seed))


def sharpen_to_copy(model: DiffusionGemmaForBlockDiffusion, factor: float = 20.0) -> DiffusionGemmaForBlockDiffusion:
    """Turn a random DiffusionGemma into a confident 'copy the canvas' denoiser (for loop tests).

    Zeroing the decoder's attention/MLP outputs leaves the residual stream = the token embedding, and the
    tied LM head then scores the input token highest; scaling the final norm makes that confident. Such a
    model accepts everything after one step and stops early under the adaptive stop rule.
    """
    with torch.no_grad():
        for n, p in model.model.decoder.layers.named_parameters():
            if "o_proj" in n or "down_proj" in n:
                p.zero_()
        model.model.decoder.norm.weight.mul_(factor)
    return model


if __name__ == "__main__":
    main()
