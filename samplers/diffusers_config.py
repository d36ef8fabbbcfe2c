"""Sampler configs for diffusers' `DiffusionGemmaPipeline` (`decoder=diffusers`): a scheduler and its knobs, typed.

Each dataclass names one scheduler of diffusers 0.42 (`EntropyBoundScheduler`; `BlockRefinementScheduler` in its
uniform-corruption mode; `DiscreteDDIMScheduler`, optionally with predictor-corrector sweeps) and splits its knobs
into the scheduler's own config (`scheduler_config()`) and the pipeline call's (`call_kwargs()`: forwards per canvas,
adaptive stop, temperature, cache). Validation runs in `__post_init__` without importing diffusers, so a bad value
fails naming `sampler.<key>` when Hydra instantiates the sampler, before any model loads. Defaults are diffusers'
own, which are the checkpoint's (48 forwards per canvas; stop once the argmax canvas held for 1 step at mean entropy
< 0.005). Knobs the pipeline never passes on (BlockRefinement's `top_k`, `top_p`, `minimal_topk`, which its uniform
mode ignores) are not offered.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar

from samplers.config import _require, check_field_types

DIFFUSERS = "diffusers"  # the decoder these samplers run on (`conf/decoder/diffusers.yaml`)
CACHE_IMPLEMENTATIONS = (None, "static")  # the pipeline's `cache_implementation`: DynamicCache | StaticCache
# DiscreteDDIMScheduler._select_positions's choices (tests/test_diffusers_decoder.py runs each through diffusers)
CORRECTOR_SELECTIONS = ("lowest_log_margin", "lowest_maxprob", "lowest_current_prob", "random")


@dataclass
class DiffusersSamplerConfig:
    """The pipeline-call knobs every scheduler shares."""

    name: str = DIFFUSERS
    num_inference_steps: int = 48  # forwards per canvas at most (a corrector's sweeps are counted inside it)
    confidence_threshold: float | None = 0.005  # adaptive stop at mean entropy below this; null: every step runs
    stability_threshold: int = 1  # ... once the argmax canvas held for this many steps
    cache_implementation: str | None = None  # null: DynamicCache; static: StaticCache (fixed shapes, compilable)

    decoder: ClassVar[str] = DIFFUSERS
    scheduler: ClassVar[str] = ""  # the diffusers class name
    canvas_length: ClassVar[None] = None  # the pipeline always decodes the model's own canvas length
    corrector_steps: ClassVar[int] = 0  # only DiscreteDDIM has a corrector

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_field_types(self)
        n, ct = self.num_inference_steps, self.confidence_threshold
        _require(n > 0, "num_inference_steps", f"must be an integer > 0, got {n}")
        _require(ct is None or ct > 0, "confidence_threshold", f"must be null or > 0, got {ct}")
        st = self.stability_threshold
        _require(1 <= st <= n, "stability_threshold", f"must be an integer in [1, num_inference_steps={n}], got {st}")
        _require(
            self.cache_implementation in CACHE_IMPLEMENTATIONS,
            "cache_implementation",
            f"must be one of {CACHE_IMPLEMENTATIONS}, got {self.cache_implementation!r}",
        )

    def scheduler_config(self) -> dict:
        """Keyword arguments of the scheduler's constructor."""
        return {}

    def call_kwargs(self) -> dict:
        """Keyword arguments of `DiffusionGemmaPipeline.__call__` that this config sets."""
        return {
            "num_inference_steps": self.num_inference_steps,
            "confidence_threshold": self.confidence_threshold,
            "stability_threshold": self.stability_threshold,
            "cache_implementation": self.cache_implementation,
        }

    @property
    def corrected_steps(self) -> int:
        """Predictor steps per canvas that run corrector sweeps (the pipeline's split of the forward budget)."""
        return (self.num_inference_steps - 1) // (1 + self.corrector_steps) if self.corrector_steps else 0

    @property
    def predictor_steps(self) -> int:
        """Predictor steps per canvas at most: the step cap (a step is one `callback_on_step_end` call)."""
        return self.num_inference_steps - self.corrected_steps * self.corrector_steps

    def forwards_at(self, step: int) -> int:
        """Denoiser forwards that predictor step `step` (0-based) of a canvas runs: 1, plus its corrector sweeps."""
        return 1 + (self.corrector_steps if step < self.corrected_steps else 0)

    def knobs(self) -> dict:
        """Flat dict of every knob (recorded with each run and used for run names / plot labels)."""
        return asdict(self)


@dataclass
class DiffusersEntropyBoundConfig(DiffusersSamplerConfig):
    """`EntropyBoundScheduler`: the checkpoint's rule; temperature annealed t_max -> t_min by the scheduler."""

    name: str = "diffusers_entropy_bound"
    entropy_bound: float = 0.1
    t_max: float = 0.8
    t_min: float = 0.4

    scheduler: ClassVar[str] = "EntropyBoundScheduler"

    def validate(self) -> None:
        super().validate()
        _require(self.entropy_bound > 0, "entropy_bound", f"must be > 0, got {self.entropy_bound}")
        _require(0 < self.t_min < math.inf, "t_min", f"must be finite and > 0, got {self.t_min}")
        _require(self.t_min <= self.t_max < math.inf, "t_max", f"must be finite and >= t_min, got {self.t_max}")

    def scheduler_config(self) -> dict:
        return {"entropy_bound": self.entropy_bound, "t_max": self.t_max, "t_min": self.t_min}


@dataclass
class DiffusersBlockRefinementConfig(DiffusersSamplerConfig):
    """`BlockRefinementScheduler`, uniform mode: commit the canvas evenly over the steps, plus every position whose
    sampled token's probability exceeds `threshold`; uncommitted positions are re-noised."""

    name: str = "diffusers_block_refinement"
    threshold: float = 0.95
    editing_threshold: float | None = None  # > 0: a committed token is replaced by a new one this confident
    temperature: float = 0.0  # 0: greedy candidates

    scheduler: ClassVar[str] = "BlockRefinementScheduler"

    def validate(self) -> None:
        super().validate()
        _require(0.0 <= self.threshold <= 1.0, "threshold", f"must be in [0, 1], got {self.threshold}")
        e = self.editing_threshold
        _require(e is None or 0.0 < e <= 1.0, "editing_threshold", f"must be null or in (0, 1], got {e}")
        _require(0 <= self.temperature < math.inf, "temperature", f"must be finite and >= 0, got {self.temperature}")

    def scheduler_config(self) -> dict:
        return {"threshold": self.threshold, "editing_threshold": self.editing_threshold}

    def call_kwargs(self) -> dict:
        return {**super().call_kwargs(), "temperature": self.temperature}


@dataclass
class DiffusersDDIMConfig(DiffusersSamplerConfig):
    """`DiscreteDDIMScheduler`: ancestral sampling from the uniform-noise posterior; `corrector_steps` > 0 adds
    leave-one-out Gibbs sweeps (each a forward) to the first predictor steps, inside the same forward budget."""

    name: str = "diffusers_ddim"
    temperature: float = 0.0  # of the x0 draw; 0: greedy
    corrector_steps: int = 0
    corrector_k: int = 1  # positions resampled per sweep
    corrector_selection: str = "lowest_log_margin"
    corrector_selection_tau: float = 1.0

    scheduler: ClassVar[str] = "DiscreteDDIMScheduler"

    def validate(self) -> None:
        super().validate()
        _require(0 <= self.temperature < math.inf, "temperature", f"must be finite and >= 0, got {self.temperature}")
        cs, n = self.corrector_steps, self.num_inference_steps
        _require(cs >= 0, "corrector_steps", f"must be an integer >= 0, got {cs}")
        _require(
            cs == 0 or self.corrected_steps >= 1,
            "corrector_steps",
            f"{cs} sweeps per step do not fit num_inference_steps={n} (a corrected step costs {1 + cs} forwards and "
            "one predictor step must remain): the corrector would never run",
        )
        _require(self.corrector_k >= 1, "corrector_k", f"must be an integer >= 1, got {self.corrector_k}")
        _require(
            self.corrector_selection in CORRECTOR_SELECTIONS,
            "corrector_selection",
            f"must be one of {CORRECTOR_SELECTIONS}, got {self.corrector_selection!r}",
        )
        tau = self.corrector_selection_tau
        _require(0 < tau < math.inf, "corrector_selection_tau", f"must be finite and > 0, got {tau}")

    def scheduler_config(self) -> dict:
        return {
            "corrector_steps": self.corrector_steps,
            "corrector_k": self.corrector_k,
            "corrector_selection": self.corrector_selection,
            "corrector_selection_tau": self.corrector_selection_tau,
        }

    def call_kwargs(self) -> dict:
        return {**super().call_kwargs(), "temperature": self.temperature}


DIFFUSERS_SAMPLERS = (DiffusersEntropyBoundConfig, DiffusersBlockRefinementConfig, DiffusersDDIMConfig)
