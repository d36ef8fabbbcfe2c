"""The continuous-batching loop every decoder family runs (uniform-state block diffusion: `harness.engine.decode`;
masked block diffusion: `harness.engine.masked`): requests stream in, finished samples stream out, and a row is
refilled the step after its request ends.

    admit   queued requests take the free rows
    pack    once the queue is empty, busy rows may move down into freed ones (a family that gains nothing skips it)
    step    one forward for every busy row, the sampler's rule, the step's one host read
    commit  per row, what the step decided (tokens kept, a canvas or block final); returns the rows that leave
    retire  the leaving rows free their rows and their results are yielded; the step's wall time is shared out

A family implements the five on its own batch state (`LoopSteps`); `run` is the loop itself, so every family
admits, steps, commits and retires in the same order, one step for all busy rows at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

from contract.records import GenerationRequest, GenerationResult


class LoopBatch(Protocol):
    """A family's batch state: which rows hold a request in flight."""

    def busy(self) -> list[int]: ...


B = TypeVar("B", bound=LoopBatch)


class LoopSteps(Protocol[B]):
    """The five named steps of one family (a decoder), over its batch state `B`."""

    def admit(self, batch: B, queue: Iterator[GenerationRequest], batch_size: int) -> None: ...

    def pack(self, batch: B) -> None: ...

    def step(self, batch: B, busy: list[int]) -> Any: ...

    def commit(self, batch: B, busy: list[int], read: Any) -> list[int]: ...

    def retire(
        self, batch: B, busy: list[int], leaving: list[int], t0: float, read: Any
    ) -> Iterator[GenerationResult]: ...


def run(
    steps: LoopSteps[B], batch: B, requests: Iterable[GenerationRequest], batch_size: int
) -> Iterator[GenerationResult]:
    """Decode `requests` with at most `batch_size` rows in flight; each result is yielded the step its row ends."""
    queue = iter(requests)
    while True:
        t0 = time.perf_counter()
        steps.admit(batch, queue, batch_size)
        steps.pack(batch)
        busy = batch.busy()
        if not busy:
            return
        read = steps.step(batch, busy)
        leaving = steps.commit(batch, busy, read)
        yield from steps.retire(batch, busy, leaving, t0, read)
