"""Series styles live in one table keyed by kind (`harness.analysis.series`): every kind and series label has a
style (name, marker, plotly symbol, colour), and no module outside the family registry and that table compares
family labels (issue 52: the interactive Pareto page had no symbol for `masked` runs, 13 modules compared labels)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from contract.decoding import DecoderKind
from contract.families import FAMILIES, names
from harness.analysis import series

REPO = Path(__file__).resolve().parents[1]
LABELS = {str(k) for k in DecoderKind}
ALLOWED = {"contract/families.py", "contract/decoding.py", "harness/analysis/series.py"}
PLOTLY_SYMBOLS = {"circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "hexagon", "pentagon", "x"}
MPL_MARKERS = set("os^Dvph*XP<>")


@pytest.mark.parametrize("label", sorted(names()))
def test_every_kind_and_label_has_a_style(label):
    kind = DecoderKind(label)
    assert kind in series.STYLES, f"{label}: no row in harness.analysis.series.STYLES"
    s = series.style(label)
    assert s is not series.UNKNOWN and s.name and s.colour.startswith("#") and len(s.colour) == 7
    assert s.marker in MPL_MARKERS and s.symbol in PLOTLY_SYMBOLS


def test_styles_tell_the_kinds_apart():
    styles = list(series.STYLES.values())
    for field in ("name", "marker", "symbol", "colour"):
        values = [getattr(s, field) for s in styles]
        assert len(set(values)) == len(values), f"two kinds share a {field}: {values}"
    assert set(series.STYLES) == {k for fam in FAMILIES.values() for k in (fam.kind, *fam.labels)}
    assert series.style("masked").symbol == "pentagon"  # the interactive page's missing symbol
    assert series.style("gidd") is series.UNKNOWN and series.name("entropy_bound") == "entropy_bound"


def test_predicates_follow_the_registry():
    baselines = {str(k) for fam in FAMILIES.values() if fam.sampler_group == "token" for k in (fam.kind, *fam.labels)}
    assert {lbl for lbl in LABELS if series.is_baseline(lbl)} == baselines
    assert {lbl for lbl in LABELS if series.is_hybrid(lbl)} == {"self-speculative", "routed"}
    assert series.is_uniform("diffusion") and not series.is_uniform("routed") and not series.is_uniform(None)
    assert series.families_name("ar+draft") == "AR+draft" and series.families_name("ar+mtp") is None
    assert series.is_routed_family(series.routed_family("steps")) and not series.is_routed_family("routed")


def _label_names(trees: list[ast.Module]) -> set[str]:
    """Module-level names bound to a label string or to a collection of them (tuples, lists, sets, dict keys; a
    collection with other words, such as forward kinds `{"denoise", ..., "ar"}`, is not one)."""
    out: set[str] = set()
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _names_label(node.value, set()):
                    out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def _names_label(node: ast.AST, names_: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in LABELS
    if isinstance(node, ast.Name):
        return node.id in names_
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "DecoderKind"
    if isinstance(node, ast.Tuple | ast.List | ast.Set):  # a collection of labels (not one of other words)
        return bool(node.elts) and all(_names_label(e, names_) for e in node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys) and all(k is not None and _names_label(k, names_) for k in node.keys)
    return False


def label_comparisons(tree: ast.AST, names_: set[str]) -> list[int]:
    """Lines comparing against a family label (==, !=, in, not in; pandas `.isin`): a label string, a DecoderKind
    member, or a module-level name bound to one or to a collection of them."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_label(s, names_) for s in (node.left, *node.comparators)):
            hits.append(node.lineno)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "isin":
            hits += [node.lineno for a in node.args if _names_label(a, names_)]
    return hits


def test_the_scan_finds_label_comparisons():
    src = 'K = ("ar", "masked")\nx = a == "diffusion"\ny = b in K\nz = df["label"].isin(K)\nw = a == DecoderKind.AR\n'
    tree = ast.parse(src)
    assert label_comparisons(tree, _label_names([tree])) == [2, 3, 4, 5]
    words = ast.parse('F = {"prefill": 1, "ar": 2}\nx = k in F')
    assert label_comparisons(words, _label_names([words])) == []
    assert label_comparisons(ast.parse('x = a == "entropy_bound"'), set()) == []


def test_no_module_outside_the_registry_and_the_style_table_compares_family_labels():
    paths = [p for pkg in ("contract", "harness", "bench") for p in sorted((REPO / pkg).rglob("*.py"))]
    trees = {p.relative_to(REPO).as_posix(): ast.parse(p.read_text()) for p in paths}
    shared = _label_names([t for rel, t in trees.items() if rel not in ALLOWED])  # e.g. a table imported elsewhere
    bad = [
        f"{rel}:{line}"
        for rel, tree in trees.items()
        if rel not in ALLOWED
        for line in label_comparisons(tree, shared | _label_names([tree]))
    ]
    assert not bad, f"family label comparisons outside the registry and harness.analysis.series: {bad}"
