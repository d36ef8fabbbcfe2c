"""The uniform-state family's state in the continuous loop (`harness.engine.loop`, steps in `harness.engine.decode`; the
masked family keeps its own, `harness.engine.masked`): one `Row` per request in flight (host side), and the `Batch`
the loop carries from step to step: the rows by slot row of the shared cache, their device buffers (canvas, stability
history, the logits workspace), the model's cache state, and what the next step owes (masks to rebuild, commits to
fold).

Row i of every buffer is slot row i of the cache (`models.cache.slot_cache`): admitting, committing, packing and
releasing
a row touch only that row's entries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from contract.records import GenerationRequest, GenerationResult
from harness.engine.stable_stream import StableRuns, StableStream


@dataclass
class Row:
    """Host-side state of one batch row (one request in flight)."""

    req: GenerationRequest
    result: GenerationResult
    admitted: float
    canvas_idx: int = 0
    step: int = 0
    outputs: list[int] = field(default_factory=list)
    pin: int | None = None  # verification: the emitted AR token this canvas holds at position 0
    warm: list[int] | None = None  # verification: the rejected draft's tokens after the pin, this canvas's start
    sc: bool = False  # its row of the logits workspace holds last step's logits (self-conditioning input)


class LogitsWorkspace:
    """The step's full-size logits buffers, allocated once per decode and reused every step.

    Torch path: one float32 (B, C, V) tensor: the LM head writes the raw logits into it, softcap and
    temperature run in place, and it is the next step's self-conditioning input (`sc` is `raw`).
    Fused path: `raw` in the model dtype plus `sc` in the model dtype, which the kernel writes while it
    reads `raw` (the next forward reads `sc` before the LM head overwrites `raw`).
    Compiled step (`dtype` = the model's): one tensor that only carries the processed logits to the next step's
    self-conditioning, which casts them to the model dtype first (as transformers does): stored in that dtype,
    the same values at half the bytes of float32."""

    def __init__(
        self,
        c: int,
        v: int,
        device: torch.device,
        fused_dtype: torch.dtype | None,
        dtype: torch.dtype = torch.float32,
    ):
        self.shape, self.device, self.fused_dtype, self.dtype = (c, v), device, fused_dtype, dtype
        self.raw = self.sc = torch.empty(0, c, v, dtype=dtype, device=device)
        self.capacity = 0

    def grow(self, b: int) -> None:
        """Grow to `b` rows (only while the first rows are admitted; later admissions refill freed rows)."""
        old_sc = self.sc
        self.raw = torch.empty(b, *self.shape, dtype=self.fused_dtype or self.dtype, device=self.device)
        fused = self.fused_dtype is not None
        self.sc = torch.empty(b, *self.shape, dtype=self.fused_dtype, device=self.device) if fused else self.raw
        self.sc[: old_sc.shape[0]].copy_(old_sc)
        self.capacity = b


@dataclass
class Batch:
    """What the loop carries from step to step. `rows[i]` is None for a free row; the device buffers have one
    row per entry of `rows` (the rows in use so far, or their compiled bucket)."""

    canvas: torch.Tensor  # (B, C) each row's current canvas
    history: torch.Tensor  # (S, B, C) each row's last argmax canvases (the stability test)
    logits: LogitsWorkspace
    sample: Callable  # the draw (`torch_sampling` / `fused_sampling` over `logits.sc`)
    stable: StableRuns | None = None  # sampler.stream_after_stable: device side
    visible: StableStream | None = None  # and host side
    rows: list[Row | None] = field(default_factory=list)
    state: Any = None  # the model's cache state (None until the first admission opens it)
    masks: Any = None  # the canvas attention masks; None when rows changed since they were built
    pending: tuple[list[int], torch.Tensor] | None = None  # rows and canvases whose commit folds into the next step
    exhausted: bool = False  # the request queue is empty

    def busy(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r is not None]

    def sc_rows(self, b: int) -> list[bool]:
        """Which of rows 0..b-1 have a self-conditioning input."""
        return [r is not None and r.sc for r in self.rows[:b]]

    def keys(self, b: int) -> torch.Tensor:
        """(3, b) on the host: rows 0..b-1's random-stream keys (seed, canvas, step); a free row's are 0."""
        rows = self.rows[:b]
        return torch.tensor(
            [
                [r.req.seed if r else 0 for r in rows],
                [r.canvas_idx if r else 0 for r in rows],
                [r.step if r else 0 for r in rows],
            ],
            dtype=torch.long,
        )

    def pins(self, b: int) -> torch.Tensor:
        """(b,) on the device: each row's pinned first token (verification), -1 where none."""
        return torch.tensor(
            [-1 if r is None or r.pin is None else r.pin for r in self.rows[:b]], device=self.canvas.device
        )

    def grow(self, top: int) -> None:
        """The per-row buffers grow to `top` rows (the first admissions only)."""
        extra = top - len(self.rows)
        if extra <= 0:
            return
        c, dev = self.canvas.shape[1], self.canvas.device
        self.rows += [None] * extra
        self.canvas = torch.cat([self.canvas, torch.zeros((extra, c), dtype=torch.long, device=dev)])
        self.history = torch.cat([self.history, torch.full((self.history.shape[0], extra, c), -1, device=dev)], 1)
        if self.stable is not None:
            self.stable.grow(extra)

    def restart(self, at: list[int], canvases: torch.Tensor) -> None:
        """Rows `at` start new canvases: nothing of them is stable yet, and the masks must be rebuilt."""
        idx = torch.tensor(at, device=self.canvas.device)
        self.canvas = self.canvas.index_copy(0, idx, canvases)
        self.history = self.history.index_fill(1, idx, -1)
        if self.stable is not None:
            self.stable.reset(idx)
        self.masks = None

    def place(self, at: list[int], new: list[Row], canvases: torch.Tensor) -> None:
        """Admitted rows take free rows `at`, each with its first canvas."""
        self.restart(at, canvases)
        for i, row in zip(at, new, strict=True):
            self.rows[i] = row
            if self.visible is not None:
                self.visible.open(row.req.sample_id)

    def packing_move(self) -> tuple[int, int] | None:
        """(highest busy row, lowest free row below it), or None when the busy rows are 0..k-1 already."""
        busy = self.busy()
        free = [i for i, r in enumerate(self.rows) if r is None]
        if busy and free and free[0] < busy[-1]:
            return busy[-1], free[0]
        return None

    def move(self, src: int, dst: int) -> None:
        """Row `src`'s host and device state to the free row `dst` (the cache's K/V moves separately)."""
        self.canvas[dst], self.history[:, dst] = self.canvas[src], self.history[:, src]
        if self.stable is not None:
            self.stable.move(src, dst)
        if self.rows[src].sc:
            self.logits.sc[dst].copy_(self.logits.sc[src])
        self.rows[dst], self.rows[src] = self.rows[src], None
        self.masks = None


@dataclass
class StepRead:
    """What a step's one device read brought back (plus the host-known temperatures), for the host's tally."""

    b: int  # rows computed (0..b-1)
    argmax: torch.Tensor  # (b, C) on the device: the canvases a commit re-encodes
    host: list[list[int]]  # per row: finished, kept, the argmax canvas [, accepted mask, kept tokens] [, stable prefix]
    temps: torch.Tensor  # (b,) on the host
    entropies: list[float] | None  # per row mean entropy, where a trajectory or step_cap verification needs it
    at: float  # when the read returned: a canvas that stopped in this step is final from here on


@dataclass
class Stops:
    """The rows whose canvas stopped this step, by what happens to them next."""

    leaving: list[int] = field(default_factory=list)  # their sequence ended
    committing: list[int] = field(default_factory=list)  # they commit the canvas and start the next
    verifying: list[int] = field(default_factory=list)  # the AR mode verifies the canvas first
