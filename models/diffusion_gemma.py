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

from contract.decoding import DecoderKind
from contract.paths import resolve_model_ref
from contract.text import Prompt, default_eos_ids, encode_prompt
from models import kv_rows, logits_blocks
from models.lora import load_adapter

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


@dataclass
class ContextState:
    """The encoded context of a batch: KV cache, which cached slots are real, next position per row.

    Every row's context is right-aligned (left padding masked out); `lengths` mirrors each row's real
    length on the host, so adding and removing rows never reads the device.
    """

    cache: Any
    attention_mask: torch.Tensor  # (B, T) bool over cached slots (False = left padding)
    next_position: torch.Tensor  # (B,) long: position id of the next token of each row
    lengths: list[int]  # real context tokens per row (host copy)
    last_hidden: torch.Tensor | None = None  # (B, H) encoder output at each row's last token (AR decoding)

    @property
    def batch_size(self) -> int:
        return len(self.lengths)


class DiffusionGemmaAdapter:
    """Loads a DiffusionGemma checkpoint from a hub id or a local folder and exposes the three block ops."""

    kind = DecoderKind.DIFFUSION

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
        adapter: str | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        if num_threads:
            torch.set_num_threads(num_threads)
        path = resolve_model_ref(path, "model.path")
        self.path, self.name = path, name or Path(path).name
        kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision}
        if device_map:
            kwargs["device_map"] = device_map
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **kwargs).eval()
        if adapter:  # a LoRA adapter (models.lora), merged: the same modules and speed as the base
            model = load_adapter(model, resolve_model_ref(adapter, "model.adapter")).eval()
        self.lora_adapter = adapter
        if not device_map:
            model.to(device)
        self._bind(
            model, AutoTokenizer.from_pretrained(path, revision=revision), enable_thinking, eos_token_ids, compile
        )

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer,
        name: str = "in-memory",
        eos_token_ids: list[int] | None = None,
        enable_thinking: bool | None = None,
        compile: bool = False,
    ) -> DiffusionGemmaAdapter:
        """Wrap a model already in memory (e.g. built directly on a GPU with random weights)."""
        self = cls.__new__(cls)
        self.path, self.name, self.lora_adapter = f"<{name}>", name, None
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
        self.eos_ids = set(eos_token_ids or default_eos_ids(model.generation_config, tokenizer))
        self._encoder = model.model.encoder
        self._layer_calls = list(model.model.decoder.layers)
        if compile:
            self._encoder = torch.compile(self._encoder)
            self._layer_calls = [torch.compile(layer) for layer in self._layer_calls]

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def softcap(self) -> float | None:
        """`final_logit_softcapping`: logits are cap * tanh(raw / cap), applied by the sampler step."""
        return self.config.text_config.final_logit_softcapping

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> ContextState:
        """Encode prompts causally, left-padded to the longest, into a fresh KV cache (one encoder forward)."""
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.config.get_text_config(decoder=True))
        hidden = self._encode(ids, mask, positions, cache)
        return ContextState(cache, mask, torch.tensor(lengths, device=self.device), lengths, hidden[:, -1])

    @torch.no_grad()
    def commit(self, state: ContextState, canvas: torch.Tensor, rows: list[int] | None = None) -> ContextState:
        """Append finished canvases to the context: re-encode them causally into the cache.

        `rows=None` commits every row (`canvas` is (B, C)); otherwise only `rows` commit (`canvas` is
        (len(rows), C)): they are encoded on their own and the other rows get masked left padding, so
        every row stays right-aligned.
        """
        c = canvas.shape[1]
        if rows is None or len(rows) == state.batch_size:
            mask = torch.nn.functional.pad(state.attention_mask, (0, c), value=True)
            positions = state.next_position[:, None] + torch.arange(c, device=canvas.device)
            hidden = self._encode(canvas, mask, positions, state.cache)
            lengths = [n + c for n in state.lengths]
            return ContextState(state.cache, mask, state.next_position + c, lengths, hidden[:, -1])
        idx = torch.tensor(rows, device=self.device)
        part = kv_rows.take(state.cache, idx)
        part_mask = torch.nn.functional.pad(state.attention_mask[idx], (0, c), value=True)
        positions = state.next_position[idx, None] + torch.arange(c, device=canvas.device)
        self._encode(canvas, part_mask, positions, part)
        kv_rows.pad_left(state.cache, c)
        kv_rows.put(state.cache, idx, part)
        mask = torch.nn.functional.pad(state.attention_mask, (c, 0), value=False).index_copy(0, idx, part_mask)
        lengths = list(state.lengths)
        for i in rows:
            lengths[i] += c
        step = torch.zeros_like(state.next_position).index_fill(0, idx, c)
        return self._trim(ContextState(state.cache, mask, state.next_position + step, lengths))

    def select(self, state: ContextState, rows: list[int]) -> ContextState:
        """Keep only `rows` (finished rows leave the batch), then drop padding no row needs."""
        if rows == list(range(state.batch_size)):
            return state
        idx = torch.tensor(rows, device=self.device, dtype=torch.long)
        kv_rows.select(state.cache, idx)
        out = ContextState(
            state.cache, state.attention_mask[idx], state.next_position[idx], [state.lengths[i] for i in rows]
        )
        return self._trim(out)

    def merge(self, a: ContextState | None, b: ContextState) -> ContextState:
        """Rows of `a` then the newly admitted rows of `b`, right-aligned to a common width."""
        if a is None or a.batch_size == 0:
            return b
        wa, wb = kv_rows.width(a.cache), kv_rows.width(b.cache)
        w = max(wa, wb)
        masks = [torch.nn.functional.pad(s.attention_mask, (w - ws, 0), value=False) for s, ws in ((a, wa), (b, wb))]
        cache = kv_rows.concat(a.cache, b.cache)
        return ContextState(
            cache, torch.cat(masks), torch.cat([a.next_position, b.next_position]), a.lengths + b.lengths
        )

    def _trim(self, state: ContextState) -> ContextState:
        lead = kv_rows.width(state.cache) - max(state.lengths, default=kv_rows.width(state.cache))
        if lead <= 0:
            return state
        kv_rows.trim_left(state.cache, lead)
        return ContextState(state.cache, state.attention_mask[:, lead:], state.next_position, state.lengths)

    def _encode(self, input_ids, full_mask, positions, cache) -> torch.Tensor:
        dummy = torch.empty((*input_ids.shape, 0), dtype=self.model.dtype, device=input_ids.device)
        masks = self.model.model.encoder.create_masks_for_generate(
            config=self.config,
            inputs_embeds=dummy,
            attention_mask=full_mask,
            past_key_values=cache,
            position_ids=positions,
        )
        out = self._encoder(
            input_ids=input_ids.contiguous(), attention_mask=masks, past_key_values=cache, position_ids=positions
        )
        kv_rows.release_views(cache)
        return out.last_hidden_state

    @torch.no_grad()
    def next_token_logits(self, state: ContextState) -> torch.Tensor:
        """(B, V) float32 logits for each row's next token from the causal encoder: the same weights decoding
        autoregressively (softcap(lm_head(encoder hidden state)), as the checkpoint's own AR head would)."""
        x = self.model.lm_head(state.last_hidden).float()
        return x.div_(self.softcap).tanh_().mul_(self.softcap) if self.softcap else x

    def canvas_masks(self, state: ContextState, canvas_length: int) -> dict:
        """Decoder attention masks for a canvas over the current context (built once per batch change)."""
        mask = torch.nn.functional.pad(state.attention_mask, (0, canvas_length), value=True)
        dummy = torch.empty((mask.shape[0], canvas_length, 1), device=mask.device)
        return self.model.model.decoder.create_diffusion_decoder_attention_mask(
            config=self.config, inputs_embeds=dummy, past_key_values=state.cache, decoder_attention_mask=mask
        )

    @torch.no_grad()
    def denoise(
        self,
        state: ContextState,
        canvas: torch.Tensor,
        masks: dict,
        sc: torch.Tensor | None = None,
        sc_rows: list[bool] | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One bidirectional decoder forward over the canvas; returns the raw (pre-softcap) LM-head logits.

        `sc` (B, C, V) holds the previous step's temperature-scaled logits; rows with `sc_rows[i]` False
        (the first step of a canvas) get no self-conditioning. `out` (B, C, V), any float dtype, receives
        the logits and may be `sc` itself: the self-conditioning signal is read before it is overwritten.
        The signal and the LM head each run over all rows' positions in one matmul per block
        (`models.logits_blocks`: the weight is read once per step where the block fits the budget), so the only
        full-size tensor is `out` (transformers' forward holds about four: softmax, its cast, the logits and
        their float copy).
        """
        dec = self.model.model.decoder
        w = dec.embed_tokens.weight
        embeds = dec.embed_tokens(canvas)
        soft = torch.zeros_like(embeds)
        b, c = canvas.shape
        budget = logits_blocks.budget_bytes(b, c, self.vocab_size)
        if sc is not None:  # as transformers: softmax in float32 of the model-dtype logits, x embed_scale
            scale = dec.embed_tokens.embed_scale.to(embeds.dtype)
            rows = [i for i in range(b) if sc_rows is None or sc_rows[i]]
            logits_blocks.self_conditioning_into(soft, sc, rows, w, scale, budget, free=out)
        hidden = dec.self_conditioning(embeds, soft)
        positions = state.next_position[:, None] + torch.arange(c, device=canvas.device)
        hidden = self._decoder_layers(hidden, positions, masks, state.cache)
        if out is None:
            out = torch.empty((b, c, self.vocab_size), dtype=torch.float32, device=canvas.device)
        return logits_blocks.lm_head_into(out, hidden, self.model.lm_head.weight, budget)

    def _decoder_layers(self, hidden, positions, masks, cache):
        """transformers' `DiffusionGemmaDecoderModel.forward` after the input embeddings (rotary, layers, norm)."""
        dec = self.model.model.decoder
        text = self.config.text_config
        rotary = {t: dec.rotary_emb(hidden, positions, t) for t in dec.unique_layer_types}
        for i in range(text.num_hidden_layers):
            t = text.layer_types[i]
            hidden = self._layer_calls[i](
                hidden,
                position_embeddings=rotary[t],
                attention_mask=masks[t],
                position_ids=positions,
                past_key_values=cache,
            )
        return dec.norm(hidden)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "path": self.path,
            "lora_adapter": self.lora_adapter,
            "dtype": str(self.model.dtype),
            "device": str(self.device),
            "canvas_length": self.canvas_length,
            "vocab_size": self.vocab_size,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }
