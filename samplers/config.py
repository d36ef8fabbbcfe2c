"""Sampler configs: every decoding knob of the block-diffusion loop, typed and validated.

One dataclass per acceptance rule (entropy bound, confidence top-k, confidence threshold), all sharing
the loop knobs of `SamplerConfig` (steps, temperature schedule, adaptive stop, self-conditioning,
remasking, canvas length, random stream). Each config's one entry point is `accept()`: which canvas
positions keep this step's sampled token; everything else is re-noised with fresh random tokens.
Validation runs in `__post_init__`, so a bad value fails when Hydra instantiates the sampler, before
any model loads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from samplers.ranking import sort_rank

if TYPE_CHECKING:  # torch is imported lazily so a bad config fails before the heavy imports
    import torch

    from samplers.draw import StepDraw

TEMPERATURE_SCHEDULES = ("linear", "cosine", "constant")
RANDOM_STREAMS = ("per_sample", "reference")
DRAWS = ("fast", "fused", "exact")
# which finished canvases the same weights' AR mode verifies (harness.engine.canvas_verify): none (pure diffusion), all
# of
# them (self-speculative decoding), or those a routing rule marks as hard (routed decoding)
VERIFY_MODES = ("off", "always", "steps", "step_cap")
VERIFY_KNOBS = ("verify", "route_steps", "route_entropy", "draft_steps", "verify_temperature")  # all off with `off`


class SamplerConfigError(ValueError):
    """A sampler knob has a bad value; the message names the key."""


def _require(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise SamplerConfigError(f"sampler.{key}: {msg}")


def check_field_types(config) -> None:
    """Type-check every field of a sampler dataclass against its annotation (ints are fine where floats are
    expected, and become floats); a bad one fails naming `sampler.<field>`."""
    allowed = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "None": (type(None),)}
    for f in fields(config):
        kinds = tuple(t for part in str(f.type).split("|") for t in allowed[part.strip()])
        value = getattr(config, f.name)
        ok = isinstance(value, kinds) and (isinstance(value, bool) == (bool in kinds) or value is None)
        _require(ok, f.name, f"must be of type {f.type}, got {value!r} ({type(value).__name__})")
        if float in kinds and isinstance(value, int):
            setattr(config, f.name, float(value))


@dataclass
class SamplerConfig:
    """Loop knobs shared by every acceptance rule. Defaults are the checkpoint's reference sampler."""

    name: str = "base"
    max_steps: int = 48  # max denoising steps per canvas
    temperature_schedule: str = "linear"  # linear | cosine | constant (constant uses t_max)
    t_max: float = 0.8  # temperature at the first step
    t_min: float = 0.4  # temperature approached at the last step
    adaptive_stop: bool = True  # stop a canvas once stable and confident
    stability_steps: int = 1  # argmax canvas unchanged for this many steps
    stop_entropy: float = 0.005  # ... and mean entropy below this
    self_conditioning: bool = True  # feed the previous step's logits back
    remask_ratio: float = 0.0  # re-noise this fraction of the least confident accepted tokens (ReMDM-style)
    canvas_length: int | None = None  # None: the model's own canvas length
    random_stream: str = "per_sample"  # per_sample (batch-invariant) | reference (bit-for-bit generate())
    draw: str = "fast"  # fast (fused Triton kernel on CUDA, blocked torch on CPU) | fused (the kernel always) | exact
    capture_trajectory: bool = False  # record the argmax canvas + mean entropy at every step
    # hybrid decoding with the same weights (harness.engine.canvas_verify): a finished canvas is a draft that the causal
    # encoder (the commit's forward) verifies: off | always (self-speculative) | steps | step_cap (routing rules)
    verify: str = "off"
    route_steps: int = 8  # verify=steps: verify the canvases that took at least this many denoising steps
    route_entropy: float = 0.0  # verify=step_cap: verify the canvases that hit the step cap with mean entropy > this
    draft_steps: int | None = None  # verify != off: a draft canvas stops after at most this many steps (None: all)
    verify_temperature: float = 0.0  # 0: greedy verification (the output is greedy AR's); > 0: speculative sampling
    # stream the prefix whose argmax tokens were accepted unchanged for this many steps (null / 0: off); the
    # decode is the same either way (harness/engine/stable_stream.py)
    stream_after_stable: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        self._check_types()
        _require(
            isinstance(self.max_steps, int) and self.max_steps > 0,
            "max_steps",
            f"must be an integer > 0, got {self.max_steps!r}",
        )
        _require(
            self.temperature_schedule in TEMPERATURE_SCHEDULES,
            "temperature_schedule",
            f"must be one of {TEMPERATURE_SCHEDULES}, got {self.temperature_schedule!r}",
        )
        _require(0 < self.t_max < math.inf, "t_max", f"must be finite and > 0, got {self.t_max}")
        _require(0 < self.t_min < math.inf, "t_min", f"must be finite and > 0, got {self.t_min}")
        _require(self.t_max >= self.t_min, "t_max", f"must be >= t_min (got t_max={self.t_max} < t_min={self.t_min})")
        _require(
            isinstance(self.stability_steps, int) and self.stability_steps >= 0,
            "stability_steps",
            f"must be an integer >= 0, got {self.stability_steps!r}",
        )
        _require(
            not self.adaptive_stop or self.stability_steps <= self.max_steps,
            "stability_steps",
            f"must be <= max_steps ({self.max_steps}), else adaptive stop can never fire; got {self.stability_steps}",
        )
        _require(self.stop_entropy > 0, "stop_entropy", f"must be > 0, got {self.stop_entropy}")
        _require(0.0 <= self.remask_ratio < 1.0, "remask_ratio", f"must be in [0, 1), got {self.remask_ratio}")
        _require(
            self.canvas_length is None or (isinstance(self.canvas_length, int) and self.canvas_length > 0),
            "canvas_length",
            f"must be null or an integer > 0, got {self.canvas_length!r}",
        )
        _require(
            self.random_stream in RANDOM_STREAMS,
            "random_stream",
            f"must be one of {RANDOM_STREAMS}, got {self.random_stream!r}",
        )
        _require(self.draw in DRAWS, "draw", f"must be one of {DRAWS}, got {self.draw!r}")
        self._validate_verify()
        self._check_streaming()

    def _validate_verify(self) -> None:
        _require(self.verify in VERIFY_MODES, "verify", f"must be one of {VERIFY_MODES}, got {self.verify!r}")
        _require(self.route_steps >= 1, "route_steps", f"must be an integer >= 1, got {self.route_steps}")
        _require(self.route_entropy >= 0, "route_entropy", f"must be >= 0, got {self.route_entropy}")
        _require(
            self.draft_steps is None or 1 <= self.draft_steps <= self.max_steps,
            "draft_steps",
            f"must be null or an integer in [1, max_steps={self.max_steps}], got {self.draft_steps!r}",
        )
        _require(self.verify_temperature >= 0, "verify_temperature", f"must be >= 0, got {self.verify_temperature}")
        if self.verify != "off":
            _require(
                self.random_stream != "reference",
                "verify",
                "needs random_stream=per_sample (the reference mode reproduces generate(), which has no verification)",
            )
            _require(
                not self.stream_after_stable,
                "verify",
                "does not stream yet: a verified canvas's tokens are known only after its verification; drop "
                "sampler.stream_after_stable",
            )

    @property
    def step_cap(self) -> int:
        """Denoising steps a canvas may take: `draft_steps` where verification is on and it is set, else max_steps."""
        return self.draft_steps if self.verify != "off" and self.draft_steps else self.max_steps

    def _check_streaming(self) -> None:
        s = self.stream_after_stable
        _require(
            s is None or (isinstance(s, int) and not isinstance(s, bool) and s >= 0),
            "stream_after_stable",
            f"must be null or an integer >= 0 (0 / null: off), got {s!r}",
        )
        if not s:
            return
        _require(
            s <= self.max_steps,
            "stream_after_stable",
            f"must be <= max_steps ({self.max_steps}), else nothing is stable before its canvas ends; got {s}",
        )
        _require(
            self.random_stream != "reference",
            "stream_after_stable",
            "is served by the continuous engine; random_stream=reference (the generate() parity mode) does not stream",
        )

    @property
    def streaming(self) -> bool:
        """Is the stable prefix streamed (`stream_after_stable` > 0)?"""
        return bool(self.stream_after_stable)

    def _check_types(self) -> None:
        check_field_types(self)

    def temperature(self, remaining: int) -> float:
        """Temperature when `remaining` of `max_steps` steps are left (N at the first step, 1 at the last).

        `linear` is transformers' schedule: t_min + (t_max - t_min) * remaining / N.
        """
        import torch

        return float(self.temperatures(torch.tensor([self.max_steps - remaining]))[0])

    def temperatures(self, step: torch.Tensor) -> torch.Tensor:
        """(B,) float32 temperature of each row at its own step (0-based) of the canvas.

        `linear` repeats transformers' float32 tensor arithmetic (remaining steps as int32 / N), so the
        scaled logits match `generate()` bit for bit.
        """
        import torch

        remaining = (self.max_steps - step).to(torch.int32)
        frac = remaining / self.max_steps
        if self.temperature_schedule == "linear":
            return self.t_min + ((self.t_max - self.t_min) * frac)
        if self.temperature_schedule == "cosine":
            return (self.t_min + (self.t_max - self.t_min) * 0.5 * (1.0 - torch.cos(math.pi * frac.double()))).float()
        return torch.full_like(frac, self.t_max)

    def accept(self, draw: StepDraw, step: torch.Tensor) -> torch.Tensor:
        """(B, C) bool: positions that keep this step's sampled token. `step` (B,) counts from 0 per row."""
        raise NotImplementedError

    def remask(self, accepted: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
        """Drop the `remask_ratio` least confident accepted positions per row (they get re-noised)."""
        if self.remask_ratio <= 0:
            return accepted
        import torch

        n_drop = torch.floor(accepted.sum(-1).float() * self.remask_ratio).long()  # (B,)
        conf = confidence.masked_fill(~accepted, float("inf"))
        return accepted & (sort_rank(conf) >= n_drop[:, None])  # the n_drop least confident accepted dropped

    def knobs(self) -> dict:
        """Flat dict of every knob (recorded with each run and used for run names / plot labels)."""
        return asdict(self)


@dataclass
class EntropyBoundConfig(SamplerConfig):
    """The reference rule (arXiv 2505.24857): accept the longest low-entropy prefix with sum(H) - max(H) <= b."""

    name: str = "entropy_bound"
    entropy_bound: float = 0.1

    def validate(self) -> None:
        super().validate()
        _require(self.entropy_bound > 0, "entropy_bound", f"must be > 0, got {self.entropy_bound}")

    def accept(self, draw: StepDraw, step: torch.Tensor) -> torch.Tensor:
        import torch

        sorted_h, idx = torch.sort(draw.entropy, dim=-1)
        keep_sorted = torch.cumsum(sorted_h, dim=-1) - sorted_h <= self.entropy_bound
        return torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)


@dataclass
class ConfidenceTopKConfig(SamplerConfig):
    """MaskGIT/LLaDA-style: after step i (1-based), keep the k*i most confident positions.

    Uniform-state noise re-decides every position each step, so "k new tokens per step" means the kept
    set grows by k per step; `tokens_per_step=null` spreads the canvas evenly over `max_steps`.
    """

    name: str = "confidence_topk"
    tokens_per_step: int | None = None

    def validate(self) -> None:
        super().validate()
        _require(
            self.tokens_per_step is None or (isinstance(self.tokens_per_step, int) and self.tokens_per_step > 0),
            "tokens_per_step",
            f"must be null or an integer > 0, got {self.tokens_per_step!r}",
        )

    def accept(self, draw: StepDraw, step: torch.Tensor) -> torch.Tensor:
        import torch

        c = draw.confidence.shape[-1]
        k = self.tokens_per_step or math.ceil(c / self.max_steps)
        n_keep = torch.clamp(k * (step + 1), max=c)  # (B,): rows may be at different steps
        return sort_rank(draw.confidence, descending=True) < n_keep[:, None]


@dataclass
class ConfidenceThresholdConfig(SamplerConfig):
    """Fast-dLLM-style: keep every position whose max probability >= threshold (at least the top one)."""

    name: str = "confidence_threshold"
    threshold: float = 0.9

    def validate(self) -> None:
        super().validate()
        _require(0.0 < self.threshold <= 1.0, "threshold", f"must be in (0, 1], got {self.threshold}")

    def accept(self, draw: StepDraw, step: torch.Tensor) -> torch.Tensor:
        keep = draw.confidence >= self.threshold
        top = draw.confidence.argmax(-1, keepdim=True)
        return keep.scatter(-1, top, True)
