"""Prompts in, text out: the rules every decoder shares, so token counts (and TPF) compare.

Prompt rendering (raw text or chat messages through the checkpoint's template), the cut at EOS / stop
strings, the one default-EOS rule, and the per-sample seed that makes decoding batch-invariant.
"""

from __future__ import annotations

import hashlib
from typing import Any

Prompt = str | list[dict[str, Any]]  # raw text, or chat messages rendered with the checkpoint's template


def default_eos_ids(generation_config, tokenizer) -> list[int]:
    """The one default-EOS rule for every decoder (TPF compares them): the checkpoint's generation config
    ids (Gemma lists several) plus the tokenizer's EOS."""
    ids: set[int] = set()
    gen_eos = getattr(generation_config, "eos_token_id", None)
    if gen_eos is not None:
        ids.update([gen_eos] if isinstance(gen_eos, int) else gen_eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("no EOS token id in the generation config or tokenizer; pass eos_token_ids")
    return sorted(ids)


def sample_seed(run_seed: int, sample_id: str) -> int:
    """A stable 63-bit seed per (run seed, sample): the same sample draws the same randoms in any batch."""
    digest = hashlib.blake2b(f"{run_seed}:{sample_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def check_thinking_template(tokenizer, enable_thinking: bool | None, what: str = "model.enable_thinking") -> None:
    """A thinking switch the chat template never reads would be silently ignored: refuse it instead."""
    if enable_thinking is None:
        return
    template = tokenizer.chat_template
    texts = template.values() if isinstance(template, dict) else [template or ""]
    if not any("enable_thinking" in t for t in texts):
        raise ValueError(
            f"{what}={enable_thinking}: the tokenizer's chat template never reads `enable_thinking`, so the "
            "switch would change nothing; use a checkpoint whose template does (Gemma 4 / DiffusionGemma) or set "
            f"{what}=null"
        )


def encode_prompt(tokenizer, prompt: Prompt, enable_thinking: bool | None = None) -> list[int]:
    """Tokenize raw text as is, or chat messages through the tokenizer's chat template (a last assistant message is
    left open, for the reply to continue).

    `enable_thinking` is passed to the template only when set (Gemma templates read it; others ignore it).
    """
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    # A closing assistant message is a reply prefix the model continues (lm-eval's `gen_prefix`: d3LLM's code tasks).
    prefix = prompt[-1].get("role") == "assistant" if prompt else False
    out = tokenizer.apply_chat_template(
        prompt, add_generation_prompt=not prefix, continue_final_message=prefix, tokenize=True, **kwargs
    )
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def cut_at_stop(
    tokenizer, token_ids: list[int], eos_ids: set[int], stop_strings: list[str]
) -> tuple[list[int], str, str]:
    """Cut new tokens after the first EOS (kept) or at the first stop string; return (ids, text, reason).

    The same rule for every decoder keeps token counts, and so TPF and tokens/s, comparable.
    """
    reason = "length"
    for i, t in enumerate(token_ids):
        if t in eos_ids:
            token_ids, reason = token_ids[: i + 1], "eos"
            break
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    if stop_strings:
        hits = [(text.find(s), s) for s in stop_strings if s and s in text]
        if hits:
            pos, _ = min(hits)
            # keep the fewest tokens whose decoded text still covers everything before the stop string
            for n in range(len(token_ids) + 1):
                if len(tokenizer.decode(token_ids[:n], skip_special_tokens=True)) >= pos:
                    break
            token_ids, text, reason = token_ids[:n], text[:pos], "stop"
    return token_ids, text, reason
