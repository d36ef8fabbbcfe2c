"""The decoder interface every model adapter implements, so evals never care how tokens are made.

Block-diffusion adapters (`models.diffusion_gemma`), plain AR and AR + draft/MTP adapters (`models.ar`)
all turn a batch of `GenerationRequest`s into `GenerationResult`s with forward counts attached.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Protocol, runtime_checkable

from harness.records import GenerationRequest, GenerationResult

REPO_ROOT = Path(__file__).resolve().parents[1]
Prompt = str | list[dict[str, Any]]  # raw text, or chat messages rendered with the checkpoint's template


@runtime_checkable
class Decoder(Protocol):
    label: str  # "diffusion" | "ar" | "ar+mtp" | "ar+draft": the series name in tables and plots
    tokenizer: Any
    resumable: bool  # a partly done run continues with exactly the samples an uninterrupted run gives

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids for a prompt (chat messages go through the chat template, thinking on/off from config)."""

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Decode a batch; results come back in request order."""

    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """Decode with at most `batch_size` requests in flight; yield each result as soon as it is final,
        with `wall_time_s` (its share of the decode wall time) and `latency_s` set."""

    def describe(self) -> dict[str, Any]:
        """Flat facts recorded with every run (model id, dtype, decoding mode...)."""


def stream_in_batches(generate: Callable[[list[GenerationRequest]], list[GenerationResult]],
                      requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
    """`Decoder.stream` for decoders that decode whole batches: consecutive batches of `batch_size`.

    A batch's wall time is shared equally among its samples; each sample's latency is the batch's."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    it = iter(requests)
    while batch := list(islice(it, batch_size)):
        t0 = time.perf_counter()
        results = generate(batch)
        wall = time.perf_counter() - t0
        for res in results:
            res.wall_time_s, res.latency_s = wall / len(batch), wall
            yield res


def decode_and_store(decoder: Decoder, requests: list[GenerationRequest], batch_size: int,
                     make_row: Callable[[GenerationResult], dict[str, Any]],
                     store: Callable[[dict[str, Any]], None], resumed: bool = False) -> Iterator[dict[str, Any]]:
    """The one decode-and-store loop: stream the requests through the decoder and store each sample's row
    (`make_row` adds scores / metadata) the moment it finishes, so a killed run loses only work in flight.
    Yields each stored row (for progress bars). `resumed`: some samples of this run are stored already;
    a decoder whose samples depend on their batch (`resumable` False) then refuses rather than mix."""
    if resumed and requests and not getattr(decoder, "resumable", True):
        raise RuntimeError(
            f"this run is partly done, and {decoder.label!r} decoding as configured makes samples depend on "
            f"their batch ({getattr(decoder, 'why_not_resumable', 'a shared random stream')}), so a resumed run "
            f"would differ from an uninterrupted one; re-run with resume=false to start afresh")
    for res in decoder.stream(requests, batch_size):
        row = make_row(res)
        store(row)
        yield row


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


def resolve_model_ref(ref: str, what: str) -> str:
    """A hub id as is, or a local folder as an existing path (relative ones may be relative to the repo root).

    Fails fast on a local-looking path that does not exist, before any weights load. Hub ids have one "/".
    """
    if not ref:
        raise ValueError(f"{what}: empty model id/path")
    path = Path(ref).expanduser()
    if path.is_dir():
        return str(path)
    if not path.is_absolute() and (REPO_ROOT / path).is_dir():
        return str(REPO_ROOT / path)
    if ref.startswith(("/", "./", "../", "~")) or ref.count("/") >= 2:
        raise FileNotFoundError(f"{what}: local model folder {ref!r} does not exist (not even under {REPO_ROOT})")
    return ref


def sample_seed(run_seed: int, sample_id: str) -> int:
    """A stable 63-bit seed per (run seed, sample): the same sample draws the same randoms in any batch."""
    digest = hashlib.blake2b(f"{run_seed}:{sample_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def encode_prompt(tokenizer, prompt: Prompt, enable_thinking: bool | None = None) -> list[int]:
    """Tokenize raw text as is, or chat messages through the tokenizer's chat template.

    `enable_thinking` is passed to the template only when set (Gemma templates read it; others ignore it).
    """
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    out = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, **kwargs)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def cut_at_stop(tokenizer, token_ids: list[int], eos_ids: set[int], stop_strings: list[str]) -> tuple[list[int], str, str]:
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
