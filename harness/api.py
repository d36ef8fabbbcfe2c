"""A short Python API for notebooks: load a decoder, pick a sampler, generate.

from harness import api
dec = api.load_decoder("outputs/tiny/diffusion", sampler="entropy_bound", entropy_bound=0.2, max_steps=16)
results = api.generate(dec, ["Hello", [{"role": "user", "content": "Why is the sky blue?"}]], max_new_tokens=64)
results[0].text, results[0].tpf, results[0].steps_per_canvas

dec = api.load_decoder("outputs/tiny/masked", kind="masked", model_kwargs={"context": "cache"})  # masked family
dec = api.decoder_from_config(["model=sudoku6_diffusion", "sampler=confidence_topk"])  # same as the CLI
api.generate(dec, prompts, on_visible=api.VisibleText(dec.tokenizer, echo=True))  # with sampler.stream_after_stable
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from contract.records import GenerationRequest, GenerationResult, StreamEvent
from contract.text import Prompt, sample_seed


def load_decoder(
    path: str, sampler: str | None = None, kind: str = "diffusion", model_kwargs: dict | None = None, **knobs
):
    """A decoder for a checkpoint (local folder or hub id) of any family: `kind` names the family or one of its
    series labels (`contract.families.names()`: diffusion, masked, ar, ar+draft, ar+mtp, ar-same-weights, ...).
    `sampler` (default: the family's; AR: `token`, greedy unless `do_sample=True`) and its `knobs` (see
    samplers.config, samplers.masked, samplers.token_rule) are checked before the weights load. `model_kwargs` go to
    the family's loading class (e.g. masked: `context="cache"`, `attention="bidirectional"`; ar+draft:
    `draft_path`)."""
    from harness.runner.plan import build_decoder, checkpoint_plan

    return build_decoder(checkpoint_plan(path, kind, sampler, knobs, model_kwargs))


def decoder_from_config(overrides: list[str] | None = None):
    """Compose conf/ exactly as `python -m harness.run <overrides>` would and build its decoder."""
    from harness.runner.plan import build_decoder, compose_plan

    return build_decoder(compose_plan(overrides))


def generate(
    decoder,
    prompts: list[Prompt],
    max_new_tokens: int = 256,
    seed: int = 0,
    stop_strings: list[str] | None = None,
    on_visible: Callable[[StreamEvent], None] | None = None,
) -> list[GenerationResult]:
    """Decode prompts (text or chat messages) in one batch; sample i uses the stream of (seed, str(i)).

    `on_visible` (a diffusion decoder with `stream_after_stable` set) gets every change of a sample's visible
    output while it decodes (`VisibleText` keeps them as text); the results are the same without it."""
    requests = [
        GenerationRequest(
            str(i), decoder.encode(p), sample_seed(seed, str(i)), max_new_tokens, list(stop_strings or [])
        )
        for i, p in enumerate(prompts)
    ]
    if on_visible is None:
        return decoder.generate(requests)
    if "on_visible" not in inspect.signature(decoder.stream).parameters:
        raise ValueError("on_visible: this decoder streams no stable prefix (the uniform-state engine does)")
    out = {r.sample_id: r for r in decoder.stream(requests, batch_size=len(requests), on_visible=on_visible)}
    return [out[r.sample_id] for r in requests]


class VisibleText:
    """An `on_visible` callback that keeps what each sample shows: its token ids and their text.

    dec = api.load_decoder("models/checkpoints/sudoku6_diffusion", stream_after_stable=2)
    view = api.VisibleText(dec.tokenizer, echo=True)  # prints each sample's visible text as it changes
    api.generate(dec, ["..."], max_new_tokens=36, on_visible=view)
    """

    def __init__(self, tokenizer, echo: bool = False):
        self.tokenizer, self.echo = tokenizer, echo
        self.token_ids: dict[str, list[int]] = {}
        self.events: list[StreamEvent] = []

    def __call__(self, event: StreamEvent) -> None:
        self.events.append(event)
        self.token_ids[event.sample_id] = event.apply(self.token_ids.get(event.sample_id, []))
        if self.echo:
            mark = " (final)" if event.final else ""
            print(f"[{event.sample_id}]{mark} {self.text(event.sample_id)!r}")

    def text(self, sample_id: str) -> str:
        return self.tokenizer.decode(self.token_ids.get(sample_id, []), skip_special_tokens=True)
