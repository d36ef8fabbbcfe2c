"""Autoregressive baselines behind the `Decoder` protocol: plain AR, and AR + draft / MTP (speculative decoding).

Both run `transformers`' own `generate` on any causal LM (hub id or local folder) and count the target's forward
passes with a hook, so TPF is measured the same way as for the diffusion decoder: valid new tokens (cut at EOS /
stop string by `contract.text.cut_at_stop`) / target forwards. `ARDecoder` decodes left-padded batches; a row stops
paying once it has finished. `AssistedARDecoder` adds a draft model through assisted generation, which
`transformers` runs one sequence at a time: label "ar+mtp" for a Gemma 4 MTP drafter (`gemma4_assistant`),
"ar+draft" for an ordinary smaller causal LM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from contract.decoding import DecoderKind, stream_in_batches
from contract.paths import resolve_model_ref
from contract.records import GenerationRequest, GenerationResult, check_requests
from contract.text import Prompt, cut_at_stop, default_eos_ids, encode_prompt
from models.forward_counter import ForwardCounter, RowFinishRecorder, StepStreamer
from models.gemma4_mtp import ASSISTANT_MODEL_TYPES, export_shared_kv, load_assistant
from models.lora import load_adapter

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
):
    """Load a causal LM in eval mode on one device, or spread by `device_map`."""
    kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    model = (loader or AutoModelForCausalLM.from_pretrained)(ref, **kwargs)
    if device_map is None:
        model.to(device)
    return model.eval()


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG (which `generate` samples from) for one call, then restore the caller's state."""
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class ARDecoder:
    """Plain AR decoding (greedy or sampled) of a causal LM with left-padded batches; label "ar"."""

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
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        enable_thinking: bool | None = None,
        eos_token_ids: list[int] | None = None,
        revision: str | None = None,
        adapter: str | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        if do_sample and not temperature > 0:
            raise ValueError(f"sampling needs temperature > 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        path = resolve_model_ref(path, "model.path")
        tokenizer = resolve_model_ref(tokenizer, "model.tokenizer") if tokenizer else path
        if num_threads:
            torch.set_num_threads(num_threads)
        self.path, self.name, self.dtype = path, name or Path(path).name, dtype
        self.do_sample, self.temperature, self.top_p, self.top_k = do_sample, temperature, top_p, top_k
        # sampled batches draw from one stream seeded by their first request: the batch shapes each sample
        self.resumable = not do_sample
        self.why_not_resumable = "sampled batches share one random stream seeded by their first request"
        self.enable_thinking = enable_thinking
        self.device_map, self.attn_implementation = device_map, attn_implementation
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer, revision=None if tokenizer != path else revision)
        self.model = load_causal_lm(path, dtype, device, device_map, attn_implementation, revision=revision)
        if adapter:  # a LoRA adapter (models.lora) on the target, merged
            self.model = load_adapter(self.model, resolve_model_ref(adapter, "model.adapter")).eval()
        self.lora_adapter = adapter
        self.device = self.model.device
        self.eos_ids = sorted(set(eos_token_ids or default_eos_ids(self.model.generation_config, self.tokenizer)))
        self._stop_cache: dict[tuple[str, ...], StopStringCriteria] = {}
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]

    # --- Decoder protocol -------------------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        check_requests(requests)
        results: dict[str, GenerationResult] = {}
        for group in _groups(requests):  # one `generate` call needs one max_new_tokens and one stop list
            for res in self._generate_group(group):
                results[res.sample_id] = res
        return [results[r.sample_id] for r in requests]

    def stream(self, requests, batch_size: int):
        return stream_in_batches(self.generate, requests, batch_size)

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
            "do_sample": self.do_sample,
            "temperature": self.temperature if self.do_sample else None,
            "top_p": self.top_p if self.do_sample else None,
            "top_k": self.top_k if self.do_sample else None,
            "enable_thinking": self.enable_thinking,
            "eos_token_ids": self.eos_ids,
            "batched": True,
            "batch_invariant": not self.do_sample,
            "nfe_rule": "target forwards while the row is running (prefill included)",
        }

    # --- internals --------------------------------------------------------------------------------
    def generation_config(self, max_new_tokens: int) -> GenerationConfig:
        """Every knob set explicitly, so the checkpoint's own sampling defaults never leak into a baseline.

        Stop strings are not set here but passed as a `StopStringCriteria` (see `stop_criterion`).
        """
        sampling = dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k) if self.do_sample else {}
        return GenerationConfig(
            do_sample=self.do_sample,
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            num_beams=1,
            repetition_penalty=1.0,
            **sampling,
        )

    def stop_criterion(self, stop_strings: list[str]) -> StopStringCriteria | None:
        """One cached criterion per stop list: building one scans the whole vocabulary (262k tokens for Gemma).

        Passed to `generate` as a criterion rather than `stop_strings=` because transformers 5.23 copies the
        config's stop strings into an assistant's own `generate` call, which then fails for want of a tokenizer.
        """
        if not stop_strings:
            return None
        key = tuple(stop_strings)
        if key not in self._stop_cache:
            self._stop_cache[key] = StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop_strings))
        return self._stop_cache[key]

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _generate_group(self, group: list[GenerationRequest]) -> list[GenerationResult]:
        max_new, stops = group[0].max_new_tokens, group[0].stop_strings
        ids, mask = self._left_pad([r.prompt_ids for r in group])
        stop = self.stop_criterion(stops)
        recorder = RowFinishRecorder(self.eos_ids, stop)
        # sampled batches draw from one stream seeded by the first request (not batch-invariant; greedy is)
        with torch.inference_mode(), seeded(group[0].seed, self.device), ForwardCounter(self.model) as forwards:
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=self.generation_config(max_new),
                stopping_criteria=StoppingCriteriaList([c for c in (stop, recorder) if c is not None]),
            )
        new = out[:, ids.shape[1] :].tolist()
        steps = len(new[0])
        row_nfe = [recorder.finish_step.get(i, steps) for i in range(len(group))]
        if forwards.count != steps or recorder.steps != steps or max(row_nfe) != steps:
            raise RuntimeError(
                f"forward accounting broke: {forwards.count} target forwards, {steps} decode steps, "
                f"{recorder.steps} criteria calls, last row finished at {max(row_nfe)}"
            )
        results = []
        for i, req in enumerate(group):
            tokens, text, reason = cut_at_stop(self.tokenizer, new[i][: row_nfe[i]], set(self.eos_ids), stops)
            if reason == "length" and i in recorder.finish_reason:
                reason = recorder.finish_reason[i]  # a stop string straddling the prompt end stopped the row
            results.append(
                GenerationResult(
                    sample_id=req.sample_id,
                    token_ids=tokens,
                    text=text,
                    nfe=row_nfe[i],
                    prompt_tokens=len(req.prompt_ids),
                    finished_by=reason,
                    row_forwards=forwards.count,
                    extra={
                        "batched": True,
                        "batch_size": len(group),
                        "batch_forwards": forwards.count,
                        "generated_before_cut": row_nfe[i],
                    },
                )
            )
        return results


class AssistedARDecoder(ARDecoder):
    """AR target + draft model via `generate(assistant_model=...)`: "ar+mtp" (Gemma 4 MTP drafter) or "ar+draft".

    Assisted generation is batch 1 in transformers, so requests run one after another (`batched=False`).
    NFE = target forwards (prefill + one verify forward per step); draft forwards are recorded in `extra`.
    """

    kind = DecoderKind.AR_DRAFT  # the assisted family before loading; `label` says ar+mtp or ar+draft once loaded

    def __init__(
        self,
        path: str = DEFAULT_MODEL,
        draft_path: str = DEFAULT_MODEL + "-assistant",
        num_assistant_tokens: int = 4,
        num_assistant_tokens_schedule: str = "constant",
        assistant_confidence_threshold: float = 0.0,
        draft_dtype: str | None = None,
        draft_device: str | None = None,
        **kwargs: Any,
    ):
        if num_assistant_tokens < 1:
            raise ValueError(f"num_assistant_tokens must be >= 1, got {num_assistant_tokens}")
        if num_assistant_tokens_schedule not in SCHEDULES:
            raise ValueError(
                f"num_assistant_tokens_schedule must be one of {SCHEDULES}, got {num_assistant_tokens_schedule!r}"
            )
        if not 0 <= assistant_confidence_threshold < 1:
            raise ValueError(f"assistant_confidence_threshold must be in [0, 1), got {assistant_confidence_threshold}")
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
        self.resumable = True  # one request at a time, seeded by its own seed
        if self.is_mtp and num_assistant_tokens_schedule != "constant":
            raise ValueError(
                "an MTP drafter drafts a fixed num_assistant_tokens; use num_assistant_tokens_schedule=constant"
            )
        super().__init__(path=path, **kwargs)
        self.draft_ref, self.draft_type = draft, draft_type
        self.num_assistant_tokens = num_assistant_tokens
        self.schedule = num_assistant_tokens_schedule
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

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "draft_path": self.draft_ref,
            "draft_model_type": self.draft_type,
            "draft_class": type(self.draft).__name__,
            "num_assistant_tokens": self.num_assistant_tokens,
            "num_assistant_tokens_schedule": self.schedule,
            "assistant_confidence_threshold": self.confidence_threshold,
            "batched": False,
            "batch_invariant": not self.do_sample,
            "kv_store_layers": self.kv_store_layers,
            "nfe_rule": "target forwards: prefill + one verify forward per draft round",
        }

    def _reset_draft_schedule(self) -> None:
        """`heuristic` writes its adapted draft length back into the draft's config; restart it for every sample."""
        cfg = self.draft.generation_config
        cfg.num_assistant_tokens = self.num_assistant_tokens
        cfg.num_assistant_tokens_schedule = self.schedule
        cfg.assistant_confidence_threshold = self.confidence_threshold

    def _generate_group(self, group: list[GenerationRequest]) -> list[GenerationResult]:
        return [self._generate_one(req) for req in group]

    def _generate_one(self, req: GenerationRequest) -> GenerationResult:
        ids, mask = self._left_pad([req.prompt_ids])
        self._reset_draft_schedule()
        streamer = StepStreamer()
        stop = self.stop_criterion(req.stop_strings)
        with (
            torch.inference_mode(),
            seeded(req.seed, self.device),
            ForwardCounter(self.model) as target_fw,
            ForwardCounter(self.draft) as draft_fw,
        ):
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=self.generation_config(req.max_new_tokens),
                assistant_model=self.draft,
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([stop] if stop else []),
            )
        new = out[0, ids.shape[1] :].tolist()
        per_step = streamer.tokens_per_step
        if target_fw.count != len(per_step) or sum(per_step) != len(new):
            raise RuntimeError(
                f"forward accounting broke: {target_fw.count} target forwards vs {len(per_step)} verify steps, "
                f"{sum(per_step)} streamed vs {len(new)} generated tokens"
            )
        tokens, text, reason = cut_at_stop(self.tokenizer, new, set(self.eos_ids), req.stop_strings)
        return GenerationResult(
            sample_id=req.sample_id,
            token_ids=tokens,
            text=text,
            nfe=target_fw.count,
            prompt_tokens=len(req.prompt_ids),
            finished_by=reason,
            accepted_per_step=[per_step],
            row_forwards=target_fw.count,
            extra={
                "batched": False,
                "draft_forwards": draft_fw.count,
                "generated_before_cut": len(new),
                "tokens_per_verify": per_step,
                "accepted_drafts": sum(per_step) - len(per_step),
            },
        )


def _groups(requests: list[GenerationRequest]) -> list[list[GenerationRequest]]:
    groups: dict[tuple, list[GenerationRequest]] = {}
    for r in requests:
        groups.setdefault((r.max_new_tokens, tuple(r.stop_strings)), []).append(r)
    return list(groups.values())
