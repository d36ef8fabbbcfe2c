"""docs/extending.md's walk-throughs stay true: each code block it marks `# file: <path>` is written as the doc says
and run for real. The toy masked rule decodes through the masked engine on a tiny checkpoint and its knob sweeps in
a real Hydra multirun (its preset yaml and the doc's model yaml found through `hydra.searchpath`); the uniform-state
rule decodes through the uniform engine; the model yaml composes and passes the family's checks; the family entry
registers in the registry (a test-local entry) and dispatch builds its engine around the doc's model class."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.app import REPO, app_env

DOC = REPO / "docs" / "extending.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_MARK = re.compile(r"# file: (\S+)\n")


def _blocks() -> list[str]:
    return [m.group(2) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def doc_files() -> dict[str, str]:
    """{path: text} of every block whose first line is `# file: <path>`."""
    return {m.group(1): block for block in _blocks() if (m := FILE_MARK.match(block))}


def family_entry() -> str:
    """The doc's `Family(...)` entry for `FAMILIES`."""
    (entry,) = [b for b in _blocks() if b.startswith("Family(")]
    return entry


def write_package_files(root: Path, prefix: str) -> list[str]:
    """The doc's files under a project package (`samplers/`, `models/`) written below `root`; their package dirs."""
    dirs = set()
    for path, text in doc_files().items():
        if path.startswith(prefix) and path.endswith(".py"):
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            dirs.add(str(target.parent))
    return sorted(dirs)


def install(tmp_path: Path, monkeypatch, package: str):
    """The doc's modules of `package` importable as `package.<module>`, as if written into the repo (the package's
    search path extended for this test only)."""
    pkg = importlib.import_module(package)
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, *write_package_files(tmp_path / "ext", f"{package}/")])
    for path in doc_files():
        if path.startswith(f"{package}/") and path.endswith(".py"):
            monkeypatch.delitem(sys.modules, path[:-3].replace("/", "."), raising=False)
    importlib.invalidate_caches()


def test_the_doc_names_its_files():
    assert set(doc_files()) == {
        "samplers/left_to_right.py",
        "conf/sampler/left_to_right_wide.yaml",
        "samplers/entropy_cap.py",
        "conf/model/tiny_masked_seed1.yaml",
        "models/gidd.py",
    }
    assert not any((REPO / p).exists() for p in doc_files())  # the reader writes them: none is shipped


def test_the_masked_rule_decodes_through_the_engine(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "samplers")
    from contract.records import GenerationRequest
    from harness.engine.masked import MaskedDiffusionDecoder
    from models.masked_diffusion import MaskedDiffusionAdapter
    from models.tiny import build_masked
    from samplers.config import SamplerConfigError
    from samplers.left_to_right import LeftToRightConfig

    with pytest.raises(SamplerConfigError, match="sampler.width: must be an integer >= 1, got 0"):
        LeftToRightConfig(width=0)
    ad = MaskedDiffusionAdapter(str(build_masked(tmp_path / "m", block_length=8)), dtype="float32", context="cache")
    reqs = [GenerationRequest(str(i), [10 + i, 11, 12, 13, 14][: 2 + i], seed=i, max_new_tokens=16) for i in range(3)]
    out = {}
    for width in (1, 3):
        rule = LeftToRightConfig(eos_early_stop=False, width=width)
        out[width] = MaskedDiffusionDecoder(ad, rule).generate(reqs)
        for o in out[width]:
            assert len(o.token_ids) == 16 and ad.mask_id not in o.token_ids
            steps = [n for block in o.accepted_per_step for n in block]
            assert max(steps) == width and o.nfe == len(steps)  # `width` positions a forward (a block's last: less)
            assert sum(steps) >= 16  # the whole last block is filled, its positions past the 16 dropped (diffusers)
    assert sum(o.nfe for o in out[3]) * 2 < sum(o.nfe for o in out[1])
    # width 1 is the left-to-right greedy order: each token is the argmax given the ones before it; width 3 guesses
    # three at once, so it decodes other tokens from the same model
    assert [o.token_ids for o in out[1]] != [o.token_ids for o in out[3]]


def test_the_uniform_rule_accepts_and_decodes(tmp_path, monkeypatch, tiny_diffusion_dir, adapter_factory):
    install(tmp_path, monkeypatch, "samplers")
    import torch

    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import SamplerConfigError
    from samplers.draw import StepDraw
    from samplers.entropy_cap import EntropyCapConfig

    with pytest.raises(SamplerConfigError, match="sampler.max_entropy"):
        EntropyCapConfig(max_entropy=0.0)
    h = torch.tensor([[0.2, 0.9, 0.4, 2.0], [3.0, 1.5, 2.5, 4.0]])
    draw = StepDraw(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long), h, 1 - h / 4)
    keep = EntropyCapConfig(max_entropy=0.5).accept(draw, torch.zeros(2, dtype=torch.long))
    assert keep.tolist() == [[True, False, True, False], [False, True, False, False]]  # at least the surest one
    ad = adapter_factory(tiny_diffusion_dir)
    reqs = [GenerationRequest(str(i), [5 + i, 6, 7], seed=i, max_new_tokens=16) for i in range(2)]
    tokens = {}
    for cap, kept in ((0.01, 1), (100.0, ad.canvas_length)):  # the random model is never that sure / always within
        out = BlockDiffusionDecoder(ad, EntropyCapConfig(max_entropy=cap, max_steps=4)).generate(reqs)
        assert all(o.token_ids and {n for c in o.accepted_per_step for n in c} == {kept} for o in out)
        tokens[cap] = [o.token_ids for o in out]
    assert tokens[0.01] != tokens[100.0]


def write_conf(root: Path) -> Path:
    """The doc's yaml files in a config dir of their own (`conf/sampler/`, `conf/model/` below it): a Hydra search
    path beside the repo's conf/."""
    for path, text in doc_files().items():
        if path.startswith("conf/"):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
    return root / "conf"


def _compose(tmp_path: Path, *overrides: str):
    from tests.helpers.app import compose_app

    return compose_app(f"hydra.searchpath=[file://{write_conf(tmp_path / 'doc')}]", *overrides)


def test_the_model_yaml_composes_and_passes_its_family_checks(tmp_path):
    from harness.runner.configs import model_kind
    from harness.runner.plan import decoder_plan
    from models.tiny import build_masked

    built = build_masked(tmp_path / "masked_seed1", seed=1, block_length=8)
    cfg = _compose(tmp_path, "model=tiny_masked_seed1", f"model.path={built}")
    assert cfg.model.name == "tiny_masked_seed1" and model_kind(cfg.model) == "masked"
    assert cfg.sampler.name == "block_refinement"  # the family's default, from the yaml's defaults entry
    decoder_plan(cfg.model, cfg.sampler)  # mask id and block length from the checkpoint, a masked sampler
    with pytest.raises(ValueError, match="uniform-state sampler on a masked model"):
        decoder_plan(cfg.model, _compose(tmp_path, "model=tiny_masked_seed1", "sampler=entropy_bound").sampler)
    shipped = set(_compose(tmp_path, "model=tiny_masked").model)
    assert set(cfg.model) <= shipped  # no key the shipped tiny masked yaml does not have


def test_the_family_entry_registers_and_dispatches(tmp_path, monkeypatch, tiny_diffusion_dir):
    install(tmp_path, monkeypatch, "models")
    from hydra.utils import get_class, get_method

    from contract import families
    from contract.records import GenerationRequest
    from harness.engine.decoders import decoder_for
    from harness.runner.configs import samplers_of
    from samplers.config import EntropyBoundConfig
    from samplers.masked import LowConfidenceConfig

    fam = eval(family_entry(), dict(vars(families)))  # the doc's entry, read where it would sit: in FAMILIES
    monkeypatch.setitem(families.FAMILIES, fam.kind, fam)
    assert families.family_of("gidd") is fam and families.family_of_target("models.gidd.GiddAdapter") is fam
    cls = get_class(fam.models[0])
    assert cls.kind == fam.kind  # what tests/test_family_registry.py holds every entry to
    assert callable(get_method(fam.decode_shape)) and fam.default_sampler in samplers_of(fam)
    model = cls(str(tiny_diffusion_dir), dtype="float32", eos_token_ids=[1])
    dec = decoder_for(model, EntropyBoundConfig(max_steps=4))
    assert isinstance(dec, get_class(fam.engine))
    (out,) = dec.generate([GenerationRequest("a", [5, 6, 7], seed=0, max_new_tokens=8)])
    assert out.token_ids and out.nfe > 0
    with pytest.raises(ValueError, match="masked sampler on a gidd model"):
        decoder_for(model, LowConfidenceConfig())


SWEEP = """
import sys

import samplers

samplers.__path__.append({ext!r})
from harness.runner import configs
from samplers.left_to_right import LeftToRightConfig

configs.SAMPLERS[LeftToRightConfig.name] = LeftToRightConfig  # the doc's step 2: one entry in SAMPLERS

import runpy

sys.argv = ["harness.run", *{overrides!r}]
runpy.run_module("harness.run", run_name="__main__", alter_sys=True)  # as `python -m harness.run` does
"""


@pytest.mark.slow
def test_the_doc_rule_sweeps_its_knob_in_a_multirun(tmp_path):
    """`python -m harness.run -m ... sampler=left_to_right_wide sampler.width=1,2` on the doc's model yaml: one run
    per value, named by the knob, each decoding `width` positions a forward."""
    from models.tiny import build_masked

    (ext,) = write_package_files(tmp_path / "ext", "samplers/")
    conf = write_conf(tmp_path / "doc")
    built = build_masked(tmp_path / "masked_seed1", seed=1, block_length=8)
    overrides = [
        "-m",
        f"hydra.searchpath=[file://{conf}]",
        "model=tiny_masked_seed1",
        f"model.path={built}",
        "sampler=left_to_right_wide",
        "sampler.width=1,2",
        "eval=prompts",
        "eval.limit=2",
        "eval.max_new_tokens=8",
        "batch_size=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra.callbacks={}",
    ]
    (register,) = [b for b in _blocks() if "SAMPLERS = {" in b]
    assert "**MASKED_SAMPLERS, LeftToRightConfig.name: LeftToRightConfig}" in register  # what SWEEP does
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP.format(ext=ext, overrides=overrides))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=app_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for p in (tmp_path / "sweep").glob("*/metrics.json"):
        m = json.loads(p.read_text())
        runs[m["run"]["sampler"]["width"]] = (p.parent, m)
    assert sorted(runs) == [1, 2]
    assert runs[1][0].name.startswith("tiny_masked_seed1__left_to_right__prompts__")  # width 1 is the default
    assert runs[2][0].name.startswith("tiny_masked_seed1__left_to_right-width2__prompts__")
    for width, (run_dir, m) in runs.items():
        rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and m["num_samples"] == 2
        for r in rows:
            steps = [n for block in r["accepted_per_step"] for n in block]
            assert max(steps) == width and r["nfe"] == len(steps)  # `width` positions a forward
    assert runs[2][1]["tpf"] > runs[1][1]["tpf"]  # two positions a forward
