"""Adapter over transformers' `DiffusionGemmaForBlockDiffusion`: prefill, denoise, commit, release.

The decode loop (harness.engine.decode) only talks to this small interface, so one code path serves a tiny
local checkpoint on the CPU and `google/diffusiongemma-26B-A4B-it` on a GPU. The batch's contexts live in
per-row slots of one preallocated cache (`models.cache.slot_cache`): row r's context is positions 0.. of slot row r,
so every row sees the positions it would see alone, and admitting, committing and releasing a row write only
its new K/V and move no other row's. The decoder writes each step's canvas K/V into the slots after the
context (scratch the commit overwrites with the encoder's K/V), and masks come from positions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

from contract.decoding import DecoderKind
from contract.paths import resolve_model_ref
from contract.text import Prompt, encode_prompt
from models.cache import reference_context, slot_attention
from models.cache.reference_context import ReferenceState
from models.cache.slot_cache import CanvasSlots, SlotCache, bucket
from models.kernels import fused_moe, logits_blocks
from models.loading.lora import load_adapter
from models.loading.remote_load import eos_ids_of

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


@dataclass
class ContextState:
    """The batch's encoded contexts: row r of `cache` holds row r's context at positions 0..lengths[r]-1.

    `lengths` mirrors the rows on the host (0: a free row), so nothing here reads the device."""

    cache: SlotCache
    lengths: list[int]
    last_hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # row -> encoder output at its last token

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    def begin_canvas(self, b: int, c: int, device) -> torch.Tensor:
        """Rows 0..b-1 write their canvas K/V into the slots after their contexts; the (b, c) canvas positions."""
        starts = self.lengths[:b]
        self.cache.begin(None, starts, c)
        return torch.tensor(starts, device=device)[:, None] + torch.arange(c, device=device)


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
        compile: bool | str = False,
        enable_thinking: bool | None = None,
        eos_token_ids: list[int] | None = None,
        num_threads: int | None = None,
        revision: str | None = None,
        adapter: str | None = None,
        experts: str | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        experts_kwargs = fused_moe.loading_kwargs(experts, device)
        if num_threads:
            torch.set_num_threads(num_threads)
        path = resolve_model_ref(path, "model.path")
        self.path, self.name = path, name or Path(path).name
        kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision, **experts_kwargs}
        if device_map:
            kwargs["device_map"] = device_map
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **kwargs).eval()
        if adapter:  # a LoRA adapter (models.loading.lora), merged: the same modules and speed as the base
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
        compile: bool | str = False,
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
        self.eos_ids = set(eos_token_ids or eos_ids_of(model, tokenizer, getattr(self, "path", None)))
        self.row_indexed = slot_attention.install(model)
        for layer in model.model.decoder.layers:  # the canvas K/V go into the slots after the context
            attn = layer.self_attn
            attn.append_to_cache = functools.partial(_append_to_slots, attn.append_to_cache, attn.layer_idx)
        self._encoder = model.model.encoder
        self._layer_calls = list(model.model.decoder.layers)
        self.compile = compile_mode(compile)
        check_graph_experts(self.compile, model)
        if self.compile == "layers":
            self._encoder = torch.compile(self._encoder)
            self._layer_calls = [torch.compile(layer) for layer in self._layer_calls]

    @property
    def whole_step(self) -> bool:
        """`compile=step`: the decode engine runs each denoising step as one compiled graph per batch bucket
        (`harness.engine.step_graph`); the cache then holds a bucket's rows."""
        return self.compile == "step"

    @functools.cached_property
    def commit_folds(self) -> bool:
        """A commit can run inside the next denoising step's forward
        (`harness.engine.step_graph.WholeStep.with_commit`):
        the encoder's text layers are the decoder's (`encoder_is_decoder`)."""
        return encoder_is_decoder(self.model)

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def softcap(self) -> float | None:
        """`final_logit_softcapping`: logits are cap * tanh(raw / cap), applied by the sampler step."""
        return self.config.text_config.final_logit_softcapping

    def open(self, rows: int, canvas_length: int | None = None, positions: int = 0) -> ContextState:
        """An empty batch state of `rows` slot rows for canvases of `canvas_length` (the model's by default),
        room for `positions` per row (it grows if needed). Prompts are encoded in canvas-sized chunks, so a
        sliding layer's ring holds window - 1 + C slots, what transformers' sliding cache holds during a step;
        under `compile=step` with commits folded into steps a forward writes 2C positions per row (the commit and
        the next canvas), so chunks and the ring's extra are 2C."""
        text = self.config.get_text_config(decoder=True)
        c = canvas_length or self.canvas_length
        chunk = c
        if self.whole_step:  # a compiled step runs a power-of-two bucket of rows: the padding rows exist, free
            rows = bucket(rows)
            chunk = 2 * c if self.commit_folds else c  # a step with a commit folded in writes 2C positions per row
        cache = SlotCache(text, rows, max(positions, chunk), chunk, self.dtype, self.device, self.row_indexed)
        return ContextState(cache, [0] * rows)

    @torch.no_grad()
    def prefill(
        self, prompts: list[list[int]], state: ContextState | None = None, rows: list[int] | None = None, grow: int = 0
    ) -> ContextState:
        """Encode prompts causally into rows `rows` of `state` (a fresh state of len(prompts) rows by default),
        in chunks; `grow`: positions each row will add (its canvases), reserved now so the cache grows once."""
        if state is None:
            state = self.open(len(prompts))
        rows = list(range(len(prompts))) if rows is None else list(rows)
        longest, chunk = max(len(p) for p in prompts), state.cache.max_chunk
        state.cache.reset(rows)
        state.cache.reserve(longest + grow + chunk)
        for lo in range(0, longest, chunk):
            part = [(r, p[lo : lo + chunk]) for r, p in zip(rows, prompts, strict=True) if len(p) > lo]
            hidden = self._encode(state, [r for r, _ in part], [lo] * len(part), [q for _, q in part])
            for i, (r, q) in enumerate(part):
                state.last_hidden[r] = hidden[i, len(q) - 1].clone()  # not a view pinning the chunk
        for r, p in zip(rows, prompts, strict=True):
            state.lengths[r] = len(p)
        return state

    @torch.no_grad()
    def prefill_whole(self, prompts: list[list[int]]) -> ReferenceState:
        """The reference mode's prefill: the prompts in one forward into transformers' own cache
        (`models.cache.reference_context`: `generate()`'s order of operations, for token-for-token parity)."""
        return reference_context.prefill(self, prompts)

    @torch.no_grad()
    def commit(self, state: ContextState, canvas: torch.Tensor, rows: list[int] | None = None) -> ContextState:
        """Append finished canvases to the context: re-encode them causally into their rows' slots (over the
        canvas K/V the denoiser left there). `rows=None` commits rows 0..len(canvas)-1."""
        if isinstance(state, ReferenceState):  # every row commits, as in generate()
            return reference_context.commit(self, state, canvas)
        rows = list(range(canvas.shape[0])) if rows is None else list(rows)
        hidden = self.encode_canvas(state, canvas, rows)
        return self.advance(state, rows, [canvas.shape[1]] * len(rows), hidden)

    @torch.no_grad()
    def encode_canvas(self, state: ContextState, canvas: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """The commit's causal forward alone: canvas i's K/V written after row rows[i]'s context, its (n, C, H)
        hidden states returned; the context lengths do not move until `advance` says how much of it to keep."""
        return self._encode(state, list(rows), [state.lengths[r] for r in rows], canvas)

    def advance(self, state: ContextState, rows: list[int], counts: list[int], hidden: torch.Tensor) -> ContextState:
        """Keep the first counts[i] encoded positions of row rows[i] (`hidden` from `encode_canvas`): positions
        past them are dropped by the length alone (masks come from lengths), no K/V is copied."""
        for i, (r, n) in enumerate(zip(rows, counts, strict=True)):
            state.lengths[r] += n
            if n:
                state.last_hidden[r] = hidden[i, n - 1].clone()  # not a view pinning the forward's output
        return state

    def release(self, state: ContextState, rows: list[int]) -> ContextState:
        """Rows leave the batch: their slots are free for the next admission (nothing is copied)."""
        state.cache.reset(rows)
        for r in rows:
            state.lengths[r] = 0
            state.last_hidden.pop(r, None)
        return state

    def move(self, state: ContextState, src: int, dst: int) -> ContextState:
        """Row `src`'s context becomes row `dst`'s (a free row): one row's K/V copied, no other row touched."""
        state.cache.move(src, dst)
        state.lengths[dst], state.lengths[src] = state.lengths[src], 0
        if src in state.last_hidden:
            state.last_hidden[dst] = state.last_hidden.pop(src)
        return state

    def _encode(self, state: ContextState, rows: list[int], starts: list[int], ids) -> torch.Tensor:
        """One causal encoder forward writing positions starts[i].. of `rows` (ids: a tensor or ragged lists)."""
        if not torch.is_tensor(ids):
            width = max(len(q) for q in ids)
            real = [len(q) for q in ids]
            ids = torch.tensor([q + [self.pad_id] * (width - len(q)) for q in ids], dtype=torch.long)
        else:
            real = None
        ids = ids.to(self.device)
        n = ids.shape[1]
        cache = state.cache
        cache.begin(rows, starts, n, real)  # rows 0..b-1 in order run in place
        positions = torch.tensor(starts, device=self.device)[:, None] + torch.arange(n, device=self.device)
        masks = cache.masks(positions, self.dtype)
        out = self._encoder(input_ids=ids, attention_mask=masks, past_key_values=cache, position_ids=positions)
        return out.last_hidden_state

    @torch.no_grad()
    def next_token_logits(self, state: ContextState, rows: list[int] | None = None) -> torch.Tensor:
        """(B, V) float32 logits for each row's next token from the causal encoder: the same weights decoding
        autoregressively (softcap(lm_head(encoder hidden state)), as the checkpoint's own AR head would)."""
        return self.ar_logits(self.last_hidden_of(state, sorted(state.last_hidden) if rows is None else rows))

    @staticmethod
    def last_hidden_of(state: ContextState, rows: list[int]) -> torch.Tensor:
        """(n, H) encoder hidden state at each row's last context token (what predicts its next token)."""
        return torch.stack([state.last_hidden[r] for r in rows])

    @torch.no_grad()
    def ar_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 softcap(lm_head(hidden)) of encoder hidden states: the AR mode's logits, op for op as
        `models.causal_lm.CausalLM.logits` computes them for `model=*_ar` (so the argmax ties break alike)."""
        x = self.model.lm_head(hidden).float()
        return x.div_(self.softcap).tanh_().mul_(self.softcap) if self.softcap else x

    def canvas_masks(self, state: ContextState, canvas_length: int, batch: int | None = None) -> dict:
        """Decoder attention masks for canvases of rows 0..batch-1 (all rows by default) over their contexts
        (built once per batch change)."""
        if isinstance(state, ReferenceState):
            return reference_context.canvas_masks(self, state, canvas_length)
        rows = list(range(state.batch_size if batch is None else batch))
        return state.cache.block_masks(rows, [state.lengths[r] for r in rows], canvas_length, self.dtype)

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
        """One bidirectional decoder forward over the canvases of rows 0..B-1 (`canvas` is (B, C)); returns the raw
        (pre-softcap) LM-head logits.

        `sc` (B, C, V) holds the previous step's temperature-scaled logits; rows with `sc_rows[i]` False
        (the first step of a canvas) get no self-conditioning. `out` (B, C, V), any float dtype, receives
        the logits and may be `sc` itself: the self-conditioning signal is read before it is overwritten.
        The signal and the LM head each run over all rows' positions in one matmul per block
        (`models.kernels.logits_blocks`: the weight is read once per step where the block fits the budget), so the only
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
        positions = state.begin_canvas(b, c, canvas.device)
        hidden = self._decoder_layers(hidden, positions, masks, state.cache)
        if out is None:
            out = torch.empty((b, c, self.vocab_size), dtype=torch.float32, device=canvas.device)
        return logits_blocks.lm_head_into(out, hidden, self.model.lm_head.weight, budget)

    def _decoder_layers(self, hidden, positions, masks, cache):
        """transformers' `DiffusionGemmaDecoderModel.forward` after the input embeddings (rotary, layers, norm)."""
        dec = self.model.model.decoder
        text = self.config.text_config
        layers = self._layer_calls[: text.num_hidden_layers]
        return run_layers(dec, layers, text.layer_types, hidden, positions, masks, cache)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "path": self.path,
            "lora_adapter": self.lora_adapter,
            "dtype": str(self.model.dtype),
            "device": str(self.device),
            "canvas_length": self.canvas_length,
            "vocab_size": self.vocab_size,
            "experts_implementation": self.config.get_text_config()._experts_implementation,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }


def run_layers(stack, layers, layer_types: list[str], hidden, positions, masks: dict, cache):
    """What transformers' DiffusionGemma encoder and decoder forwards do after the input embeddings: rotary per
    layer type, the layers (`layers[i]`, of type layer_types[i]) over `cache`, the final norm of `stack`."""
    rotary = {t: stack.rotary_emb(hidden, positions, t) for t in stack.unique_layer_types}
    for i, layer in enumerate(layers):
        t = layer_types[i]
        hidden = layer(
            hidden,
            position_embeddings=rotary[t],
            attention_mask=masks[t],
            position_ids=positions,
            past_key_values=cache,
        )
    return stack.norm(hidden)


def encoder_is_decoder(model) -> bool:
    """Whether the encoder's text stack computes what the decoder's layers compute under a causal mask: the same
    layer types, each layer's weights and buffers (`layer_scalar`), the final norm, the token embedding (and its
    scale) and the rotary tables equal (the checkpoint ties the weights; transformers does not tie buffers). The
    attention modules differ only in how they write the cache and in `is_causal`, which an explicit mask overrides."""
    enc, dec = model.model.encoder.language_model, model.model.decoder
    n = enc.config.num_hidden_layers
    if n != dec.text_config.num_hidden_layers or enc.config.layer_types[:n] != dec.text_config.layer_types[:n]:
        return False
    pairs = [(enc.layers[i], dec.layers[i]) for i in range(n)]
    pairs += [(enc.norm, dec.norm), (enc.embed_tokens, dec.embed_tokens), (enc.rotary_emb, dec.rotary_emb)]
    for a, b in pairs:
        ta = dict(a.named_parameters()) | dict(a.named_buffers())
        tb = dict(b.named_parameters()) | dict(b.named_buffers())
        if ta.keys() != tb.keys():
            return False
        for name, x in ta.items():
            y = tb[name]
            if x is not y and (x.shape != y.shape or not torch.equal(x, y.to(x.device))):
                return False
    return torch.equal(torch.as_tensor(enc.embed_tokens.embed_scale), torch.as_tensor(dec.embed_tokens.embed_scale))


def compile_mode(value: bool | str | None) -> str | None:
    """`model.compile`: false (eager), true / "layers" (the encoder and each decoder layer compiled on their
    own) or "step" (the whole denoising step, one graph per batch bucket: `harness.engine.step_graph`)."""
    if value in (None, False, "false", "none", ""):
        return None
    if value in (True, "true", "layers"):
        return "layers"
    if value == "step":
        return "step"
    raise ValueError(f"model.compile: false, true / layers or step, got {value!r}")


def check_graph_experts(compile: str | None, model) -> None:
    """`model.compile=step` on CUDA replays CUDA graphs, and no host sync may run inside one. Under torch.compile
    transformers' `grouped_mm` experts use torch's grouped matmul for bfloat16 weights only; for other dtypes they
    call a fallback op that reads the expert offsets back to the host (`offs.tolist()`), which fails inside a
    CUDA-graph capture. Refused here, when the model is bound, rather than at the first step's capture."""
    if compile != "step" or model.device.type != "cuda" or model.dtype == torch.bfloat16:
        return
    experts = model.config.get_text_config()._experts_implementation
    if experts in (None, "grouped_mm"):
        raise ValueError(
            f"model.compile=step on CUDA needs model.dtype=bfloat16 with the default experts (got {model.dtype}): "
            "transformers' grouped_mm experts sync with the host for other dtypes, which a CUDA graph cannot hold; "
            "use model.dtype=bfloat16, model.experts=triton or model.compile=layers"
        )


def _append_to_slots(original, layer_idx: int, past_key_values, key_states, value_states):
    """The decoder attention's `append_to_cache`: over a `SlotCache` the canvas K/V are written into the slots
    after each row's context and the span returned; any other cache keeps transformers' own (a concatenation)."""
    if isinstance(past_key_values, (SlotCache, CanvasSlots)):
        return past_key_values.update(key_states, value_states, layer_idx)
    return original(past_key_values, key_states, value_states)
