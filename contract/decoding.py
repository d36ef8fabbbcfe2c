"""The decoding contract: what a decoder is, what a block-diffusion adapter offers the engine, what a
self-driving eval and a result store look like, and the one decode-and-store loop.

Models implement `Decoder` (AR baselines) or `BlockDiffusionAdapter` (wrapped by the engine in
`harness.engine.decode`); evals either list items for the harness's loop or, like lm-eval, implement
`SelfDrivingEval` and decode through `decode_and_store`; the harness drives both and is never called back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from itertools import islice
from typing import Any, Protocol, runtime_checkable

from contract.records import GenerationRequest, GenerationResult
from contract.text import Prompt


class DecoderKind(StrEnum):
    """The series a run belongs to, used alike in run names, tables and plots."""

    DIFFUSION = "diffusion"
    AR = "ar"
    AR_MTP = "ar+mtp"
    AR_DRAFT = "ar+draft"
    AR_SAME_WEIGHTS = "ar-same-weights"  # a block-diffusion checkpoint decoding autoregressively (its encoder)
    SELF_SPECULATIVE = "self-speculative"  # diffusion drafts every canvas, the same weights' AR mode verifies it
    ROUTED = "routed"  # diffusion drafts, a routing rule sends the hard canvases to the AR mode's verification
    MASKED = "masked"  # masked (absorbing-state) block diffusion: LLaDA 2.x, SDAR, LLaDA, Dream (harness.engine.masked)


@runtime_checkable
class Decoder(Protocol):
    label: DecoderKind  # the series name in tables and plots
    tokenizer: Any
    resumable: bool  # a partly done run continues with exactly the samples an uninterrupted run gives

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids for a prompt (chat messages go through the chat template, thinking on/off from config)."""

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Decode a batch; results come back in request order."""

    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """Decode with at most `batch_size` requests in flight; yield each result as soon as it is final,
        with `wall_time_s` (its share of the decode wall time), `latency_s` and `ttft_s` set."""

    def describe(self) -> dict[str, Any]:
        """Flat facts recorded with every run (model id, dtype, decoding mode...)."""


@runtime_checkable
class BlockDiffusionAdapter(Protocol):
    """What the block-diffusion engine (`harness.engine.decode`) needs from a model (`models.diffusion_gemma`).

    A batch state holds per-row slots of one KV cache: row r keeps its context until it is released, rows are
    admitted into free rows, committed and released without reading the device or moving other rows."""

    kind: DecoderKind  # DIFFUSION
    tokenizer: Any
    device: Any  # torch.device
    dtype: Any  # torch.dtype of the weights (the self-conditioning input is cast to it)
    vocab_size: int
    canvas_length: int
    pad_id: int
    eos_ids: set[int]
    softcap: float | None  # logits are softcap * tanh(raw / softcap), applied by the sampler step

    def encode(self, prompt: Prompt) -> list[int]: ...

    def describe(self) -> dict[str, Any]: ...

    def open(self, rows: int, canvas_length: int | None = None) -> Any:
        """An empty batch state of `rows` rows for canvases of `canvas_length`."""

    def prefill(self, prompts: list[list[int]], state: Any = None, rows: list[int] | None = None, grow: int = 0) -> Any:
        """Encode prompts into rows `rows` of `state` (a fresh state of len(prompts) rows when None)."""

    def prefill_whole(self, prompts: list[list[int]]) -> Any:
        """The reference mode's state: the prompts in one forward, in the reference implementation's own cache
        (`canvas_masks`, `denoise` and `commit` of every row accept it)."""

    def commit(self, state: Any, canvas: Any, rows: list[int] | None = None) -> Any:
        """Re-encode finished canvases of `rows` (rows 0..len(canvas)-1 when None) into the context."""

    def encode_canvas(self, state: Any, canvas: Any, rows: list[int]) -> Any:
        """The commit's causal forward without advancing the contexts: (n, C, H) hidden states (verification)."""

    def advance(self, state: Any, rows: list[int], counts: list[int], hidden: Any) -> Any:
        """Keep the first counts[i] positions `encode_canvas` wrote for rows[i]; the rest is dropped, not copied."""

    def ar_logits(self, hidden: Any) -> Any:
        """float32 next-token logits of the AR mode (causal encoder + LM head) from encoder hidden states."""

    def last_hidden_of(self, state: Any, rows: list[int]) -> Any:
        """(n, H) encoder hidden state at each row's last context token (it predicts the row's next token)."""

    def release(self, state: Any, rows: list[int]) -> Any:
        """`rows` leave the batch; their slots take the next admissions."""

    def move(self, state: Any, src: int, dst: int) -> Any:
        """Row `src`'s context becomes free row `dst`'s (packing the last rows of a run)."""

    def canvas_masks(self, state: Any, canvas_length: int, batch: int | None = None) -> Any:
        """Decoder attention masks for the canvases of rows 0..batch-1."""

    def denoise(
        self, state: Any, canvas: Any, masks: Any, sc: Any = None, sc_rows: list[bool] | None = None, out: Any = None
    ) -> Any:
        """One denoiser forward; raw (pre-softcap) logits (B, C, V) written into `out`."""


class Store(Protocol):
    """Where a run's samples go (`harness.runner.store.ResultStore`): appended one by one, reloadable for resume."""

    run_dir: Any  # pathlib.Path

    def load(self) -> dict[str, dict[str, Any]]: ...

    def append(self, row: dict[str, Any]) -> None: ...


@runtime_checkable
class SelfDrivingEval(Protocol):
    """An eval that builds and scores its own requests (lm-eval), decoding through `decode_and_store`."""

    name: str

    def run(self, decoder: Decoder, store: Store, batch_size: int, seed: int) -> dict[str, Any]:
        """Decode every unfinished sample into `store`; return the run's metrics."""


def stream_in_batches(
    generate: Callable[[list[GenerationRequest]], list[GenerationResult]],
    requests: Iterable[GenerationRequest],
    batch_size: int,
) -> Iterator[GenerationResult]:
    """`Decoder.stream` for decoders that decode whole batches: consecutive batches of `batch_size`.

    A batch's wall time is shared equally among its samples; each sample's latency is the batch's, and so is its
    time to first token (nothing is shown before the batch ends)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    it = iter(requests)
    while batch := list(islice(it, batch_size)):
        t0 = time.perf_counter()
        results = generate(batch)
        wall = time.perf_counter() - t0
        for res in results:
            res.wall_time_s, res.latency_s, res.ttft_s = wall / len(batch), wall, wall
            yield res


def decode_and_store(
    decoder: Decoder,
    requests: list[GenerationRequest],
    batch_size: int,
    make_row: Callable[[GenerationResult], dict[str, Any]],
    store: Callable[[dict[str, Any]], None],
    resumed: bool = False,
) -> Iterator[dict[str, Any]]:
    """The one decode-and-store loop: stream the requests through the decoder and store each sample's row
    (`make_row` adds scores / metadata) the moment it finishes, so a killed run loses only work in flight.
    Yields each stored row (for progress bars). `resumed`: some samples of this run are stored already;
    a decoder whose samples depend on their batch (`resumable` False) then refuses rather than mix."""
    if resumed and requests and not getattr(decoder, "resumable", True):
        raise RuntimeError(
            f"this run is partly done, and {decoder.label!r} decoding as configured makes samples depend on "
            f"their batch ({getattr(decoder, 'why_not_resumable', 'a shared random stream')}), so a resumed run "
            f"would differ from an uninterrupted one; re-run with resume=false to start afresh"
        )
    for res in decoder.stream(requests, batch_size):
        row = make_row(res)
        store(row)
        yield row
