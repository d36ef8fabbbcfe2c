"""Adapter over transformers' `DiffusionGemmaForBlockDiffusion`: prefill, denoise, commit.

The decode loop (harness.decode) only talks to this small interface, so one code path serves a tiny
local checkpoint on the CPU and `google/diffusiongemma-26B-A4B-it` on a GPU. Positions are computed
per row from the attention mask, so left-padded rows see exactly the positions they would see alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from models.base import Prompt, encode_prompt

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


@dataclass
class ContextState:
    """The encoded context of a batch: KV cache, which cached slots are real, next position per row."""

    cache: Any
    attention_mask: torch.Tensor  # (B, T) bool over cached slots (False = left padding)
    next_position: torch.Tensor  # (B,) long: position id of the next token of each row


class DiffusionGemmaAdapter:
    """Loads a DiffusionGemma checkpoint from a hub id or a local folder and exposes the three block ops."""

    kind = "diffusion"

    def __init__(
        self,
        path: str,
        name: str | None = None,
        dtype: str = "auto",
        device: str = "cpu",
        device_map: str | None = None,
        attn_implementation: str | None = None,
        compile: bool = False,
        enable_thinking: bool | None = None,
        eos_token_ids: list[int] | None = None,
        num_threads: int | None = None,
        revision: str | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        if num_threads:
            torch.set_num_threads(num_threads)
        self.path, self.name = path, name or Path(path).name
        kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision}
        if device_map:
            kwargs["device_map"] = device_map
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **kwargs).eval()
        if not device_map:
            model.to(device)
        self._bind(model, AutoTokenizer.from_pretrained(path, revision=revision), enable_thinking, eos_token_ids, compile)

    @classmethod
    def from_model(cls, model, tokenizer, name: str = "in-memory", eos_token_ids: list[int] | None = None,
                   enable_thinking: bool | None = None, compile: bool = False) -> DiffusionGemmaAdapter:
        """Wrap a model already in memory (e.g. built directly on a GPU with random weights)."""
        self = cls.__new__(cls)
        self.path, self.name = f"<{name}>", name
        self._bind(model.eval(), tokenizer, enable_thinking, eos_token_ids, compile)
        return self

    def _bind(self, model, tokenizer, enable_thinking, eos_token_ids, compile) -> None:
        self.model, self.tokenizer, self.enable_thinking = model, tokenizer, enable_thinking
        self.device = model.device
        self.config = model.config
        self.vocab_size = self.config.text_config.vocab_size
        self.canvas_length = self.config.canvas_length
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.config.text_config.pad_token_id
        self.eos_ids = set(eos_token_ids or self._default_eos())
        self._encoder, self._forward = model.model.encoder, model.forward
        if compile:
            self._encoder = torch.compile(self._encoder)
            self._forward = torch.compile(model.forward)

    def _default_eos(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> ContextState:
        """Encode left-padded prompts causally into a fresh KV cache (one encoder forward)."""
        attention_mask = attention_mask.bool()
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.config.get_text_config(decoder=True))
        self._encode(input_ids, attention_mask, positions, cache)
        return ContextState(cache, attention_mask, attention_mask.sum(-1))

    @torch.no_grad()
    def commit(self, state: ContextState, canvas: torch.Tensor) -> ContextState:
        """Append a finished canvas to the context: re-encode it causally into the cache."""
        mask = torch.nn.functional.pad(state.attention_mask, (0, canvas.shape[1]), value=True)
        positions = state.next_position[:, None] + torch.arange(canvas.shape[1], device=canvas.device)
        self._encode(canvas, mask, positions, state.cache)
        return ContextState(state.cache, mask, state.next_position + canvas.shape[1])

    def _encode(self, input_ids, full_mask, positions, cache) -> None:
        dummy = torch.empty((*input_ids.shape, 0), dtype=self.model.dtype, device=input_ids.device)
        masks = self.model.model.encoder.create_masks_for_generate(
            config=self.config, inputs_embeds=dummy, attention_mask=full_mask, past_key_values=cache, position_ids=positions
        )
        self._encoder(input_ids=input_ids.contiguous(), attention_mask=masks, past_key_values=cache, position_ids=positions)

    def canvas_masks(self, state: ContextState, canvas_length: int) -> dict:
        """Decoder attention masks for a canvas over the current context (built once per canvas)."""
        mask = torch.nn.functional.pad(state.attention_mask, (0, canvas_length), value=True)
        dummy = torch.empty((mask.shape[0], canvas_length, 1), device=mask.device)
        return self.model.model.decoder.create_diffusion_decoder_attention_mask(
            config=self.config, inputs_embeds=dummy, past_key_values=state.cache, decoder_attention_mask=mask
        )

    @torch.no_grad()
    def denoise(self, state: ContextState, canvas: torch.Tensor, masks: dict, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        """One bidirectional decoder forward over the canvas; returns float32 logits (B, C, V)."""
        positions = state.next_position[:, None] + torch.arange(canvas.shape[1], device=canvas.device)
        out = self._forward(
            decoder_input_ids=canvas,
            self_conditioning_logits=self_conditioning_logits,
            decoder_attention_mask=masks,
            past_key_values=state.cache,
            decoder_position_ids=positions,
        )
        return out.logits

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "path": self.path, "dtype": str(self.model.dtype), "device": str(self.device),
                "canvas_length": self.canvas_length, "vocab_size": self.vocab_size,
                "parameters": sum(p.numel() for p in self.model.parameters())}
