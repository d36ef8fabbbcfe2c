"""Streaming what is already stable (`sampler.stream_after_stable=S`): show a canvas's settled prefix early.

Why: a block-diffusion canvas can change anywhere until it stops, so nothing is final before its commit (the
time to first token). Many positions settle long before that, and a user could read them; the price is that a
shown token may still change. This module decides what is shown when and counts what was taken back, without
touching the decode: it only reads the step's accepted mask and argmax canvas.

- A position is *stable* when, in each of its canvas's last S steps, the sampler kept its sampled token (it was
  accepted, not re-noised) and its argmax token (what a stopped canvas commits) stayed the same. The stream shows
  argmax tokens.
- Shown: the longest run of stable positions from the start of the current canvas (earlier canvases are committed
  and wholly visible), cut after the first EOS and at `max_new_tokens`. Shown tokens stay shown when that prefix
  shrinks; they are rewritten when a stable token differs from the shown one, at the canvas's commit (the argmax
  canvas) and when the sample ends (its result's `token_ids`: cut at EOS / stop string, pads dropped).
- `revised_tokens`: the output positions at which a shown token was later replaced by another one or taken back
  (the output ended before it), each counted once however often it changed (A -> B -> A counts: the user saw it
  change). `ttfv_s`: admitted -> the first step that showed a token.

Cost: with S off (null / 0) the engine builds none of this. With S on, the device keeps two (B, C) tensors (run
counts, last argmax) and the step's one host read carries one more column (each row's stable prefix length), so
there is no extra device read; the host compares only each row's current canvas part.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from contract.records import GenerationResult, StreamEvent


class StableRuns:
    """Device side: per row and position, for how many consecutive steps its argmax was accepted unchanged."""

    def __init__(self, after: int, canvas_length: int, device: torch.device):
        self.after = after
        self.runs = torch.zeros((0, canvas_length), dtype=torch.int32, device=device)
        self.last = torch.full((0, canvas_length), -1, dtype=torch.long, device=device)

    def grow(self, extra: int) -> None:
        """`extra` more rows (the first admissions)."""
        self.runs = torch.cat([self.runs, self.runs.new_zeros((extra, self.runs.shape[1]))])
        self.last = torch.cat([self.last, self.last.new_full((extra, self.last.shape[1]), -1)])

    def reset(self, rows: torch.Tensor) -> None:
        """`rows` start a fresh canvas: nothing of it is stable yet."""
        self.runs.index_fill_(0, rows, 0)
        self.last.index_fill_(0, rows, -1)

    def move(self, src: int, dst: int) -> None:
        self.runs[dst], self.last[dst] = self.runs[src], self.last[src]

    def update(self, keep: torch.Tensor, argmax: torch.Tensor) -> torch.Tensor:
        """After a step of rows 0..b-1 (`keep`, `argmax`: (b, C)): each row's stable prefix length, (b,) long."""
        b = keep.shape[0]
        same = keep & (argmax == self.last[:b])
        runs = torch.where(same, self.runs[:b] + 1, keep.to(torch.int32))
        self.runs[:b], self.last[:b] = runs, argmax
        return (runs >= self.after).long().cumprod(-1).sum(-1)


class VisibleOutput:
    """Host side, one sample: the token ids shown so far, the positions revised, when the first was shown."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.revised: set[int] = set()
        self.first_shown_at: float | None = None

    def replace(self, offset: int, new: list[int], at: float) -> int | None:
        """The visible ids become `tokens[:offset] + new`; returns the first changed position (None: no change)."""
        old, tail = self.tokens, self.tokens[offset:]
        same = next((i for i, (a, b) in enumerate(zip(tail, new, strict=False)) if a != b), min(len(tail), len(new)))
        if same == len(tail) == len(new):
            return None
        start = offset + same
        self.revised.update(p for p in range(start, len(old)) if p - offset >= len(new) or old[p] != new[p - offset])
        self.tokens = old[:offset] + list(new)
        if self.tokens and self.first_shown_at is None:
            self.first_shown_at = at
        return start


class StableStream:
    """The rows' visible outputs during one decode, and the events handed to `callback` (None: only counted)."""

    def __init__(self, eos_ids: set[int], callback: Callable[[StreamEvent], None] | None = None):
        self.eos_ids, self.callback = eos_ids, callback
        self.outputs: dict[str, VisibleOutput] = {}

    def open(self, sample_id: str) -> None:
        self.outputs[sample_id] = VisibleOutput()

    def denoised(
        self, row: int, sample_id: str, offset: int, argmax: list[int], prefix: int, limit: int, at: float
    ) -> None:
        """A step that did not end the canvas at output position `offset`: show its stable prefix (`prefix` long,
        at most `limit` tokens, cut after the first EOS); what is shown beyond it stays unless the prefix ends."""
        stable = argmax[: min(prefix, limit)]
        eos = next((i for i, t in enumerate(stable) if t in self.eos_ids), None)
        vis = self.outputs[sample_id]
        if eos is not None:
            new = stable[: eos + 1]
        else:
            new = stable + vis.tokens[offset + len(stable) :]
        self._show(row, sample_id, offset, new, at)

    def committed(self, row: int, sample_id: str, offset: int, canvas: list[int], at: float) -> None:
        """The canvas at `offset` is final and the sample goes on: all of it is visible."""
        self._show(row, sample_id, offset, canvas, at)

    def finished(self, row: int, res: GenerationResult, admitted: float, at: float) -> None:
        """The sample ended: its visible ids become its result's, and `ttfv_s` / `revised_tokens` are recorded."""
        self._show(row, res.sample_id, 0, res.token_ids, at, final=True)
        vis = self.outputs.pop(res.sample_id)
        shown = vis.first_shown_at
        res.ttfv_s = shown - admitted if shown is not None else res.ttft_s  # nothing shown: the output is empty
        res.revised_tokens = len(vis.revised)

    def _show(self, row: int, sample_id: str, offset: int, new: list[int], at: float, final: bool = False) -> None:
        vis = self.outputs[sample_id]
        start = vis.replace(offset, new, at)
        if self.callback is not None and (start is not None or final):
            start = len(vis.tokens) if start is None else start
            self.callback(StreamEvent(sample_id, row, start, tuple(vis.tokens[start:]), final, len(vis.revised)))
