"""Count what `transformers.generate` spends, from outside: forward passes, per-row finish steps, tokens per step.

The AR baselines report NFE = target forward passes, so these counters hook the real modules instead of
trusting a formula: a forward pre-hook counts every call of a model, a no-op stopping criterion records the
step at which each row of a batch finished (with the same EOS / stop-string checks `generate` applies), and
a streamer records how many tokens each target forward committed (one `put` per decode or verify step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import StoppingCriteria
from transformers.generation.stopping_criteria import EosTokenCriteria, StopStringCriteria
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


class RowFinishRecorder(StoppingCriteria):
    """Records the 1-based decode step at which each row first meets EOS or a stop string; never stops anything.

    It runs the same EOS check `generate` builds and the very stop-string criterion passed to it, on the same
    `input_ids`, so its verdicts match the ones that froze the rows; a row running at step k paid for forward k.
    """

    def __init__(self, eos_ids: list[int], stop: StopStringCriteria | None = None):
        self.criteria: list[StoppingCriteria] = []
        if eos_ids:
            self.criteria.append(EosTokenCriteria(eos_token_id=torch.tensor(eos_ids)))
        if stop is not None:
            self.criteria.append(stop)
        self.steps = 0
        self.finish_step: dict[int, int] = {}
        self.finish_reason: dict[int, str] = {}

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        self.steps += 1
        for crit in self.criteria:
            hit = crit(input_ids, scores).to("cpu")
            reason = "eos" if isinstance(crit, EosTokenCriteria) else "stop"
            for row in hit.nonzero().flatten().tolist():
                if row not in self.finish_step:
                    self.finish_step[row] = self.steps
                    self.finish_reason[row] = reason
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


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
