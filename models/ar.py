"""Autoregressive baselines' adapters: plain AR, and AR + draft / MTP (speculative decoding).

Both load any causal LM (hub id or local folder); the family registry puts them on the continuous-batching AR
engine (`harness.engine.ar`, per-row KV slots): the same engine semantics as the diffusion decoder (rows leave and
refill every step, one host read per step, counter-based random streams, so samples do not depend on their
batch). NFE = target forwards, TPF = valid new tokens (cut at EOS / stop string by `contract.text.cut_at_stop`)
/ target forwards. `AssistedARDecoder` adds a drafter and verifies k drafts per row per step in one batched
target forward: label "ar+mtp" for a Gemma 4 MTP drafter (`gemma4_assistant`), "ar+draft" for an ordinary
smaller causal LM. transformers' `generate()` and assisted generation are the references the tests check
these against, token for token and (at batch 1) accepted count for accepted count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from contract.decoding import DecoderKind
from contract.paths import resolve_model_ref
from contract.text import Prompt, encode_prompt
from models.causal_lm import CausalLM
from models.drafters import Drafter, ModelDrafter, MTPDrafter
from models.gemma4_mtp import ASSISTANT_MODEL_TYPES, export_shared_kv, load_assistant
from models.kernels import fused_moe
from models.loading.lora import load_adapter
from models.loading.remote_load import eos_ids_of
from samplers.token_draw import TokenSampling

DEFAULT_MODEL = "google/gemma-4-26B-A4B-it"
DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SCHEDULES = ("constant", "heuristic", "heuristic_transient")


def load_causal_lm(
    ref: str,
    dtype: str,
    device: str | None,
    device_map: Any,
    attn_implementation: str | None,
    loader=None,
    revision: str | None = None,
    experts: str | None = None,
):
    """Load a causal LM in eval mode on one device, or spread by `device_map`; `experts`: its MoE experts'
    implementation (`models.kernels.fused_moe.CHOICES`, None: transformers' default)."""
    kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision, **fused_moe.loading_kwargs(experts, device)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    model = (loader or AutoModelForCausalLM.from_pretrained)(ref, **kwargs)
    if device_map is None:
        model.to(device)
    return model.eval()


class ARDecoder:
    """Plain AR (greedy or sampled) of a causal LM: loads it, encodes prompts, describes itself; label "ar".
    `harness.engine.decoders.decoder_for(ARDecoder(...))` (or `harness.api.load_decoder(path, kind="ar")`)
    decodes with it."""

    label = kind = DecoderKind.AR

    def __init__(
        self,
        path: str = DEFAULT_MODEL,
        name: str | None = None,
        tokenizer: str | None = None,
        dtype: str = "bfloat16",
        device: str | None = None,
        device_map: Any = None,
        attn_implementation: str | None = None,
        num_threads: int | None = None,
        enable_thinking: bool | None = None,
        eos_token_ids: list[int] | None = None,
        revision: str | None = None,
        adapter: str | None = None,
        experts: str | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        fused_moe.loading_kwargs(experts, device)  # a bad choice fails before the tokenizer and weights load
        path = resolve_model_ref(path, "model.path")
        tokenizer = resolve_model_ref(tokenizer, "model.tokenizer") if tokenizer else path
        if num_threads:
            torch.set_num_threads(num_threads)
        self.path, self.name, self.dtype = path, name or Path(path).name, dtype
        self.resumable = True  # every random number is keyed by (sample seed, position): batch-invariant
        self.enable_thinking = enable_thinking
        self.device_map, self.attn_implementation = device_map, attn_implementation
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer, revision=None if tokenizer != path else revision)
        self.model = load_causal_lm(
            path, dtype, device, device_map, attn_implementation, revision=revision, experts=experts
        )
        if adapter:  # a LoRA adapter (models.loading.lora) on the target, merged
            self.model = load_adapter(self.model, resolve_model_ref(adapter, "model.adapter")).eval()
        self.lora_adapter = adapter
        self.device = self.model.device
        self.eos_ids = sorted(set(eos_token_ids or eos_ids_of(self.model, self.tokenizer, path, revision)))
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self.target = CausalLM(self.model)

    def new_drafter(self, sampling: TokenSampling) -> Drafter | None:
        """The drafter the engine runs with the run's token rule (plain AR: none)."""
        return None

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    def describe(self) -> dict[str, Any]:
        return {
            "decoder": self.label,
            "name": self.name,
            "path": self.path,
            "lora_adapter": self.lora_adapter,
            "model_class": type(self.model).__name__,
            "dtype": self.dtype,
            "device": str(self.device),
            "device_map": str(self.device_map),
            "attn_implementation": self.model.config._attn_implementation,
            "experts_implementation": getattr(self.model.config, "_experts_implementation", None),
            "enable_thinking": self.enable_thinking,
            "eos_token_ids": self.eos_ids,
            "batched": True,
            "engine": "continuous batching, per-row KV slots",
            "batch_invariant": True,
            "nfe_rule": "target forwards while the row is running (the prefill and first token count as one)",
        }


class AssistedARDecoder(ARDecoder):
    """AR target + drafter, batched speculative decoding: "ar+mtp" (Gemma 4 MTP drafter) or "ar+draft".

    Every step each row gets up to `num_draft_tokens` drafts, the target verifies all rows' drafts in one
    forward, and each row keeps its own accepted prefix plus the target's bonus token (greedy: lossless;
    sampled: the speculative-sampling rule). NFE = target forwards (the first one also reads the prompt);
    draft forwards are recorded in `extra` and the run stats.
    """

    kind = DecoderKind.AR_DRAFT  # the assisted family before loading; `label` says ar+mtp or ar+draft once loaded

    def __init__(
        self,
        path: str = DEFAULT_MODEL,
        draft_path: str = DEFAULT_MODEL + "-assistant",
        num_draft_tokens: int = 4,
        num_draft_tokens_schedule: str = "constant",
        assistant_confidence_threshold: float = 0.0,
        draft_dtype: str | None = None,
        draft_device: str | None = None,
        **kwargs: Any,
    ):
        if num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
        if num_draft_tokens_schedule not in SCHEDULES:
            raise ValueError(f"num_draft_tokens_schedule must be one of {SCHEDULES}, got {num_draft_tokens_schedule!r}")
        if assistant_confidence_threshold != 0:
            raise ValueError(
                "assistant_confidence_threshold must be 0: the batched engine always drafts num_draft_tokens "
                f"(transformers' confidence-based early stop is not implemented), got {assistant_confidence_threshold}"
            )
        if draft_dtype is not None and draft_dtype not in DTYPES:
            raise ValueError(f"draft_dtype must be one of {sorted(DTYPES)}, got {draft_dtype!r}")
        draft = resolve_model_ref(draft_path, "model.draft_path")
        draft_config = AutoConfig.from_pretrained(draft)
        draft_type = draft_config.model_type
        target_vocab = AutoConfig.from_pretrained(resolve_model_ref(path, "model.path")).get_text_config().vocab_size
        if draft_config.get_text_config().vocab_size != target_vocab:
            raise ValueError(
                f"draft vocabulary ({draft_config.get_text_config().vocab_size}) differs from the target's "
                f"({target_vocab}); "
                "assisted decoding here needs a draft with the target's tokenizer"
            )
        self.is_mtp = draft_type in ASSISTANT_MODEL_TYPES
        self.label = DecoderKind.AR_MTP if self.is_mtp else DecoderKind.AR_DRAFT
        if self.is_mtp and num_draft_tokens_schedule != "constant":
            raise ValueError("an MTP drafter drafts a fixed num_draft_tokens; use num_draft_tokens_schedule=constant")
        super().__init__(path=path, **kwargs)
        self.draft_ref, self.draft_type = draft, draft_type
        self.num_draft_tokens = num_draft_tokens
        self.schedule = num_draft_tokens_schedule
        self.confidence_threshold = assistant_confidence_threshold
        self.draft = load_causal_lm(
            draft,
            draft_dtype or self.dtype,
            draft_device or str(self.device),
            None,
            self.attn_implementation,
            loader=load_assistant if self.is_mtp else None,
        )
        self.kv_store_layers = export_shared_kv(self.model) if self.is_mtp else []

    def new_drafter(self, sampling: TokenSampling) -> Drafter:
        k = self.num_draft_tokens
        if self.is_mtp:
            return MTPDrafter(self.draft, self.target, self.kv_store_layers, k)
        return ModelDrafter(CausalLM(self.draft), k, sampling)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "draft_path": self.draft_ref,
            "draft_model_type": self.draft_type,
            "draft_class": type(self.draft).__name__,
            "num_draft_tokens": self.num_draft_tokens,
            "num_draft_tokens_schedule": self.schedule,
            "assistant_confidence_threshold": self.confidence_threshold,
            "kv_store_layers": self.kv_store_layers,
            "nfe_rule": "target forwards: one verify forward per step (the first also reads the prompt)",
        }
