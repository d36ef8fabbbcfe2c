"""Count what `transformers.generate` spends, from outside: forward passes and tokens per step.

The AR baselines report NFE = target forward passes, so these counters hook the real modules instead of
trusting a formula: a forward pre-hook counts every call of a model, and a streamer records how many tokens
each target forward committed (one `put` per decode or verify step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers.generation.streamers import BaseStreamer


class ForwardCounter:
    """Context manager: counts the calls of `module` (each call = one forward pass) while active."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.count = 0
        self._handle = None

    def _hook(self, _module, _args, _kwargs):
        self.count += 1

    def __enter__(self) -> ForwardCounter:
        self.count = 0
        self._handle = self.module.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


@dataclass
class StepStreamer(BaseStreamer):
    """Records the number of tokens each `put` delivers: the prompt first, then one entry per target forward."""

    sizes: list[int] = field(default_factory=list)
    ended: bool = False

    def put(self, value) -> None:
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        self.ended = True

    @property
    def tokens_per_step(self) -> list[int]:
        """New tokens committed by each target forward (the first `put` is the prompt)."""
        return self.sizes[1:]
