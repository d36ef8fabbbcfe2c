"""How each decoding series looks and what it is, in one table keyed by kind: the only place outside the family
registry (`contract.families`) that names series labels.

A run's `label` (`contract.decoding.DecoderKind`: a family's kind or one of its series labels) picks its row: the
legend name, the matplotlib marker (PNG/SVG fronts, scaling and length figures), the plotly symbol (the interactive
Pareto page), the colour (family comparisons, ParallelBench panels; the Pareto fronts colour a diffusion series by
its sampler and grey every baseline), and what it is for the tables: whether its sampler's knobs label its points
(`knob_labelled`), and the family comparison's word (`families`, `harness.analysis.families`). Tables and figures
ask the predicates below instead of comparing labels (tests/test_series_styles.py holds both to this).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.decoding import DecoderKind


@dataclass(frozen=True)
class SeriesStyle:
    name: str  # legend name of a baseline series, and the kind's own name in tables
    marker: str  # matplotlib marker
    symbol: str  # plotly marker symbol (the interactive Pareto page)
    colour: str  # the kind's colour where figures colour by kind (families, ParallelBench)
    knob_labelled: bool  # a sampler's knobs draft its tokens: they label its points (baselines: their name)
    families: str | None = None  # its name in the family comparison (`harness.analysis.families`); None: not in it


GREY = "#595959"
STYLES: dict[DecoderKind, SeriesStyle] = {
    DecoderKind.DIFFUSION: SeriesStyle("diffusion", "o", "circle", "#1f77b4", True, "uniform-state"),
    DecoderKind.AR: SeriesStyle("AR", "s", "square", GREY, False, "AR"),
    DecoderKind.AR_MTP: SeriesStyle("AR+MTP", "^", "triangle-up", "#8c8c8c", False),
    DecoderKind.AR_DRAFT: SeriesStyle("AR+draft", "D", "diamond", "#ff7f0e", False, "AR+draft"),
    DecoderKind.AR_SAME_WEIGHTS: SeriesStyle("AR, same weights", "v", "triangle-down", "#3f3f3f", False),
    DecoderKind.SELF_SPECULATIVE: SeriesStyle("self-speculative", "P", "cross", "#8c564b", True),
    DecoderKind.ROUTED: SeriesStyle("routed", "h", "hexagon", "#e377c2", True),
    DecoderKind.MASKED: SeriesStyle("masked", "p", "pentagon", "#17becf", True, "masked"),
}
UNKNOWN = SeriesStyle("other", "X", "x", "#7f7f7f", False)  # a label no family has (e.g. a run of a removed family)
# the family comparison's order (tables and the families figure)
_COMPARED = (DecoderKind.MASKED, DecoderKind.DIFFUSION, DecoderKind.AR, DecoderKind.AR_DRAFT)
FAMILIES_ORDER = [STYLES[k].families for k in _COMPARED]


def kind_of(label: Any) -> DecoderKind | None:
    """The series kind a table's `label` names (None: none, e.g. a missing value)."""
    try:
        return DecoderKind(str(label))
    except ValueError:
        return None


def style(label: Any) -> SeriesStyle:
    return STYLES.get(kind_of(label), UNKNOWN)


def name(label: Any) -> str:
    """The legend name of a label (`AR+MTP`); an unknown label as it is."""
    return style(label).name if kind_of(label) else str(label)


def is_uniform(label: Any) -> bool:
    """Plain uniform-state block diffusion (DiffusionGemma's engine, no verification): the sampler-sweep series."""
    return kind_of(label) == DecoderKind.DIFFUSION


def is_masked(label: Any) -> bool:
    return kind_of(label) == DecoderKind.MASKED


def is_routed(label: Any) -> bool:
    return kind_of(label) == DecoderKind.ROUTED


def is_self_speculative(label: Any) -> bool:
    return kind_of(label) == DecoderKind.SELF_SPECULATIVE


def is_hybrid(label: Any) -> bool:
    """Diffusion drafts, the same weights' AR mode verifies (`harness.engine.canvas_verify`)."""
    return is_routed(label) or is_self_speculative(label)


def is_plain_ar(label: Any) -> bool:
    """Plain AR: one token per forward (the reference of output-length ratios)."""
    return kind_of(label) == DecoderKind.AR


def is_same_weights_ar(label: Any) -> bool:
    return kind_of(label) == DecoderKind.AR_SAME_WEIGHTS


def knob_labelled(label: Any) -> bool:
    """Its sampler's knobs label its points (diffusion, hybrid, masked); a baseline is labelled by its name."""
    return style(label).knob_labelled


def is_baseline(label: Any) -> bool:
    """Every AR family's series: one point per model, no sampler sweep."""
    return kind_of(label) is not None and not knob_labelled(label)


def families_name(label: Any) -> str | None:
    """The label's name in the family comparison (None: not compared there)."""
    return style(label).families


def is_kind_family(family: Any) -> bool:
    """A figure family key that is a kind's own series (a baseline's label, or `diffusion` without a sampler name),
    not a sampler family (`entropy_bound`, `masked`, `self-speculative`, `routed (steps)`)."""
    return kind_of(family) is not None and not (is_masked(family) or is_hybrid(family))


def routed_family(verify: Any) -> str:
    """A routed run's figure family: one per routing rule, `routed (steps)`."""
    return f"{STYLES[DecoderKind.ROUTED].name} ({verify})"


def is_routed_family(family: Any) -> bool:
    return str(family).startswith(f"{STYLES[DecoderKind.ROUTED].name} (")
