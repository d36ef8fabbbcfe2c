"""The family registry (`contract.families`) is the one place that says what a decoding family is (issue 45): every
entry resolves to real classes and functions, every shipped model config is registered with the kind its class
declares, and no module outside the registry branches on a family."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hydra.utils import get_class, get_method
from omegaconf import OmegaConf

from contract.decoding import DecoderKind
from contract.families import FAMILIES, Family, family_of, family_of_target, names

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_every_entry_resolves(kind):
    from harness.runner.configs import SAMPLERS, samplers_of

    fam = FAMILIES[kind]
    for target in fam.models:
        assert getattr(get_class(target), "kind", DecoderKind.AR) == kind, target  # the class says the same
    for engine in (fam.engine, *fam.engines.values()):
        if engine is not None:
            get_class(engine)
    for fn in (fam.decode_shape, fam.config_check, fam.scorer):
        if fn is not None:
            assert callable(get_method(fn)), fn
    assert fam.default_sampler in samplers_of(fam) and fam.engine is not None  # every family takes a sampler
    assert all(name in SAMPLERS for name in samplers_of(fam))


def test_every_shipped_model_config_is_registered():
    """Composing reads a model's kind from the registry (no import): every `_target_` under conf/model is in it."""
    targets = {OmegaConf.load(p).get("_target_") for p in sorted((REPO / "conf" / "model").glob("*.yaml"))} - {None}
    assert len(targets) >= 5
    for target in sorted(targets):
        assert family_of_target(str(target)) is not None, f"{target}: not in contract.families"


def test_an_unregistered_class_is_asked_for_its_kind(tmp_path, monkeypatch):
    from harness.runner.configs import model_kind

    (tmp_path / "kinds_demo.py").write_text(
        "from contract.decoding import DecoderKind\n\nclass Mine:\n    kind = DecoderKind('masked')\n\n"
        "class Plain:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert model_kind(OmegaConf.create({"_target_": "kinds_demo.Mine"})) == DecoderKind.MASKED
    assert model_kind(OmegaConf.create({"_target_": "kinds_demo.Plain"})) == DecoderKind.AR


def test_labels_find_their_family():
    assert family_of("ar+mtp").kind == DecoderKind.AR_DRAFT and family_of("routed").kind == DecoderKind.DIFFUSION
    assert family_of("ar+mtp").sampler_group == family_of("ar-same-weights").sampler_group == "token"
    assert set(names()) == {k.value for k in DecoderKind}  # every series label belongs to exactly one family
    with pytest.raises(ValueError, match="unknown decoding family"):
        family_of("gidd")


class DemoEngine:
    def __init__(self, model, sampler):
        self.model, self.sampler = model, sampler


class DemoModel:
    kind = "hybrid-demo"


def test_a_new_family_is_one_entry(monkeypatch):
    """Dispatch reads the registry only: a family added to it is decoded by its engine, its sampler group checked."""
    from harness.engine.decoders import decoder_for
    from samplers.config import EntropyBoundConfig
    from samplers.masked import LowConfidenceConfig

    engine = f"{__name__}.DemoEngine"
    fam = Family("hybrid-demo", "a demo", (f"{__name__}.DemoModel",), engine, "masked", "low_confidence", "x.shape")
    monkeypatch.setitem(FAMILIES, "hybrid-demo", fam)
    dec = decoder_for(DemoModel(), LowConfidenceConfig())
    assert isinstance(dec, DemoEngine) and dec.sampler.name == "low_confidence"
    with pytest.raises(ValueError, match="uniform-state sampler on a hybrid-demo model"):
        decoder_for(DemoModel(), EntropyBoundConfig())


# modules allowed to name a family's kind: the registry, the enum, and classes declaring their own kind / label
DECLARING = {"contract/families.py", "contract/decoding.py", "harness/analysis/series.py"}  # + the style table


def _branches_on_kind(tree: ast.AST) -> list[int]:
    """Lines that compare against a DecoderKind member or a model's `.kind` (if/elif, ==, in): branching on a family."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            named = isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name)
            if named and side.value.id == "DecoderKind":
                hits.append(node.lineno)
            if isinstance(side, ast.Tuple) and any(
                isinstance(e, ast.Attribute) and getattr(e.value, "id", None) == "DecoderKind" for e in side.elts
            ):
                hits.append(node.lineno)
    return hits


def test_no_module_outside_the_registry_branches_on_the_family():
    bad = []
    for pkg in ("contract", "samplers", "models", "evals", "harness", "bench"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in DECLARING:
                continue
            bad += [f"{rel}:{line}" for line in _branches_on_kind(ast.parse(path.read_text()))]
    assert not bad, f"family branches outside contract/families.py: {bad}"
