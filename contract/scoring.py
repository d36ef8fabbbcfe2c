"""The likelihood-scoring contract: what a scorer is asked, what it answers, and the knobs it reads.

A scorer gives each (context, continuation) pair a log-likelihood estimate the way its family defines one
(`models.likelihood.scorer_for`): the exact sum of log-probabilities (AR), a Monte-Carlo ELBO (masked diffusion) or a
decision read (uniform-state diffusion). Torch-free, so config checks and the lm-eval bridge's composition checks
import it without loading a model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

CFG_UNCOND = ("prompt", "context")  # the unconditional copy masks: the request's context | all a block conditions on


@dataclass(frozen=True)
class LikelihoodConfig:
    """Knobs of likelihood scoring (`eval.likelihood.*`); each family reads only its own (`used_by`).

    `mc_num`: Monte-Carlo samples per request (masked ELBO; LLaDA's eval uses 128, 1 for one-token answers);
    `mc_batch`: samples per forward (memory only: the estimate does not depend on it);
    `cfg_scale`: classifier-free guidance, logits = uncond + (scale + 1) (cond - uncond), the prompt masked for
    uncond (LLaDA's `cfg`; 0 = off); `cfg_uncond`: what the unconditional copy masks on a block-causal model, where
    block j is scored given the prompt and blocks < j: `prompt` (the request's context only, the default) or
    `context` (every token block j is conditioned on; equal on bidirectional models, docs/likelihood.md);
    `greedy_check`: compute lm-eval's `is_greedy` (masked: one more forward per
    block); `batch_size`: requests per forward (AR and decision read).
    """

    mc_num: int = 128
    mc_batch: int = 32
    cfg_scale: float = 0.0
    cfg_uncond: str = "prompt"
    greedy_check: bool = True
    batch_size: int = 8

    def __post_init__(self):
        if self.mc_num < 1:
            raise ValueError(f"eval.likelihood.mc_num: must be >= 1, got {self.mc_num}")
        if self.mc_batch < 1:
            raise ValueError(f"eval.likelihood.mc_batch: must be >= 1, got {self.mc_batch}")
        if not self.cfg_scale >= 0 or math.isinf(self.cfg_scale):
            raise ValueError(f"eval.likelihood.cfg_scale: must be a finite number >= 0, got {self.cfg_scale}")
        if self.cfg_uncond not in CFG_UNCOND:
            raise ValueError(f"eval.likelihood.cfg_uncond: one of {'|'.join(CFG_UNCOND)}, got {self.cfg_uncond!r}")
        if self.batch_size < 1:
            raise ValueError(f"eval.likelihood.batch_size: must be >= 1, got {self.batch_size}")

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> LikelihoodConfig:
        values = dict(values or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"eval.likelihood: unknown keys {unknown} (known: {sorted(cls.__dataclass_fields__)})")
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# which LikelihoodConfig keys each scoring method reads (the rest are reported as unused)
USED_KNOBS = {
    "exact": ("batch_size",),
    "mc_elbo": ("mc_num", "mc_batch", "cfg_scale", "cfg_uncond", "greedy_check"),
    "decision_read": ("batch_size",),
}


@dataclass(frozen=True)
class LikelihoodRequest:
    """One pair to score: token ids of the context and of the continuation; `seed` keys every random draw."""

    sample_id: str
    context_ids: list[int]
    continuation_ids: list[int]
    seed: int = 0


@dataclass
class LikelihoodResult:
    """A request's estimate: `logprob` (lm-eval's first value), `is_greedy` (its second; None if not computed),
    `stderr` (Monte-Carlo standard error of `logprob`; 0 for exact methods, None with one sample), `forwards` (model
    rows run for this request: sequence forwards, whatever the batching)."""

    sample_id: str
    logprob: float
    is_greedy: bool | None
    method: str
    forwards: int
    tokens: int
    stderr: float | None = 0.0
    mc_num: int | None = None
    token_logprobs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Scorer(Protocol):
    method: str  # exact | mc_elbo | decision_read

    def score(self, requests: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        """Results in request order; each depends only on its own request (not on the batch or its order)."""

    def describe(self) -> dict[str, Any]:
        """The method and the knobs it used (recorded with the run)."""
