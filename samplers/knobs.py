"""The sampler-knob vocabulary: one short spelling per knob, shared by run names and plot labels.

Run names (`harness.runner.configs.run_name`) write `<short><value>` for every knob that differs from the
sampler's defaults (`n8-b0.3`); plot labels (`harness.figures.pareto`) write `<short>=<value>` for the knobs
that vary between the plotted runs (`n=8 b=0.3`). The spellings are part of every existing run-dir name,
so they never change: a re-run must land in the same directory to resume. A knob without an entry is
spelled in full. Plain Python (no torch), so any layer may import it.
"""

from __future__ import annotations

from typing import Any

SHORT = {
    "entropy_bound": "b",
    "max_steps": "n",
    "tokens_per_step": "k",
    "threshold": "thr",
    "remask_ratio": "rm",
    "temperature_schedule": "T",
    "t_max": "tmax",
    "t_min": "tmin",
    "self_conditioning": "sc",
    "adaptive_stop": "stop",
    "canvas_length": "C",
    "random_stream": "rs",
    "draw": "draw",
    "verify": "v",
    "route_steps": "rn",
    "route_entropy": "rh",
    "draft_steps": "dn",
    "verify_temperature": "vT",
    "stream_after_stable": "stream",
    # decoder=diffusers (samplers.diffusers_config)
    "num_inference_steps": "n",
    "confidence_threshold": "ct",
    "stability_threshold": "st",
    "cache_implementation": "cache",
    "editing_threshold": "edit",
    "temperature": "temp",
    "corrector_steps": "cs",
    "corrector_k": "ck",
    "corrector_selection": "csel",
    "corrector_selection_tau": "ctau",
}

# Fields that identify the sampler or only add output, never change a decode: not knobs in a run name.
NOT_KNOBS = ("name", "capture_trajectory", "stream_after_stable")


def short(knob: str) -> str:
    """The knob's short spelling (its full name when it has none)."""
    return SHORT.get(knob, knob)


def run_name_part(knob: str, value: Any) -> str:
    """`b0.3`: how a knob that differs from its default appears in a run name."""
    return f"{short(knob)}{value}"


def label_part(knob: str, value: Any) -> str:
    """`b=0.3`: how a knob that varies between runs appears next to a point in a plot."""
    return f"{short(knob)}={value:g}" if isinstance(value, float) else f"{short(knob)}={value}"


def changed_knobs(knobs: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The knobs a run name shows: every knob (in order) whose value differs from the sampler's default."""
    return {k: v for k, v in knobs.items() if not k.startswith("_") and k not in NOT_KNOBS and defaults.get(k) != v}
