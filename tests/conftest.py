"""Shared fixtures: tiny real checkpoints built once per session (no downloads), one CPU thread.

Helpers shared by several test modules live in `tests/helpers/`. Tiers (markers registered in pyproject.toml):
`slow`, `sandbox` and `gpu` tests are left out by `make test-fast`; `gpu` tests skip where CUDA is absent.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from tests.helpers import sandbox_guard

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Without a GPU, Triton kernels can only run in its interpreter, and Triton reads this flag when it is first
# imported (transformers may import it while tests are collected). CPU decodes never pick the kernel unless
# a test asks for `sampler.draw=fused`.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(1)


# Test modules whose graders start sandboxed processes: under pytest-xdist (`make test` runs two workers) they
# share one worker, since the adversarial tests assert that no sandbox-uid process outlives a grading, machine-wide.
SANDBOX_MODULES = ("test_sandbox.py", "test_sandbox_adversarial.py", "test_livecodebench.py")
# Loud on purpose: without bubblewrap the sandbox refuses to grade, and these tests cannot show it holds.
BWRAP_MISSING = "BUBBLEWRAP MISSING: sandbox tests not run; install it: apt-get install -y bubblewrap"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("sandbox") or item.path.name in SANDBOX_MODULES:
            item.add_marker(pytest.mark.xdist_group("sandbox"))
    skip_sandbox_without_bwrap(items)
    if getattr(config.option, "loadgroup", False):  # set in xdist workers under --dist loadgroup
        tag_xdist_groups(items)
    if torch.cuda.is_available():
        return
    no_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(no_gpu)


def skip_sandbox_without_bwrap(items) -> None:
    """Every `sandbox`-marked test, however it got the mark (a decorator, `pytestmark`, a `pytest.param`), skips
    with the one reason the terminal summary counts when bubblewrap is missing: grading refuses to run there."""
    if shutil.which("bwrap") is not None:
        return
    skip = pytest.mark.skip(reason=BWRAP_MISSING)
    for item in items:
        if item.get_closest_marker("sandbox"):
            item.add_marker(skip)


def tag_xdist_groups(items) -> None:
    """pytest-xdist 3.8 sends grouped tests to one worker by tagging their node ids `<id>@<group>` through
    `item._nodeid`, which pytest 9 no longer reads (the id lives in `item._id`): untagged, `--dist loadgroup` spread
    the Slurm, Ray and sandbox tests over both workers (two clusters at once). Tag them here the way pytest 9 reads."""
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest < 9: xdist's own tagging works
        return
    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid.rsplit("::", 1)[-1]:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")


# Every test that reaches the sandbox must be marked `sandbox` (tests/helpers/sandbox_guard.py): each test gets a fresh
# log file that the sandbox's wrapped probes and runs append to, in this process and in Python subprocesses.
sandbox_guard.install()
_GUARD_DIR, _GUARD_COUNT = Path(tempfile.mkdtemp(prefix="sandbox-guard-")), itertools.count()
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(sandbox_guard.SITE_DIR), os.environ.get("PYTHONPATH")) if p)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    os.environ[sandbox_guard.LOG_VAR] = str(_GUARD_DIR / f"{next(_GUARD_COUNT)}.log")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """After each phase: an unmarked test whose phase reached the sandbox fails, naming what it reached."""
    report = yield
    log = Path(os.environ.get(sandbox_guard.LOG_VAR, _GUARD_DIR / "none"))
    if log.exists():
        reached = sorted(set(log.read_text().split("\n")) - {""})
        log.unlink()
        if not item.get_closest_marker("sandbox") and not report.skipped:
            report.outcome = "failed"
            why = f"{item.nodeid} {sandbox_guard.UNMARKED.format(', '.join(reached))}"
            report.longrepr = f"{why}\n{report.longrepr or ''}"
    return report


@pytest.fixture(scope="session")
def tiny_diffusion_dir(tmp_path_factory):
    """Random tiny DiffusionGemma, canvas 8: never confident, so every canvas uses all its steps."""
    from models.tiny import build_diffusion

    return build_diffusion(tmp_path_factory.mktemp("tiny_diffusion"), seed=0, canvas_length=8)


@pytest.fixture(scope="session")
def sharp_diffusion_dir(tmp_path_factory):
    """A confident copy-denoiser (models.tiny.sharpen_to_copy): stops after a couple of steps."""
    from models.tiny import build_diffusion

    return build_diffusion(tmp_path_factory.mktemp("sharp_diffusion"), seed=1, sharpen=20.0, canvas_length=8)


@pytest.fixture(scope="session")
def medium_diffusion_dir(tmp_path_factory):
    """Partly sharpened: canvases stop after varying numbers of steps."""
    from models.tiny import build_diffusion

    return build_diffusion(tmp_path_factory.mktemp("medium_diffusion"), seed=2, sharpen=8.0, canvas_length=8)


@pytest.fixture(scope="session")
def windowed_dir(tmp_path_factory):
    """Partly sharpened (canvases stop after varying steps) with a sliding window shorter than the context,
    so row surgery on sliding-window cache layers (ring slots) is exercised."""
    from models.tiny import build_diffusion

    return build_diffusion(tmp_path_factory.mktemp("windowed"), seed=3, sharpen=8.0, canvas_length=8, sliding_window=6)


@pytest.fixture(scope="session")
def adapter_factory():
    from models.diffusion_gemma import DiffusionGemmaAdapter

    cache = {}

    def make(path, **kw):
        key = (str(path), repr(sorted(kw.items())))
        if key not in cache:
            cache[key] = DiffusionGemmaAdapter(str(path), dtype="float32", eos_token_ids=kw.pop("eos", [1]), **kw)
        return cache[key]

    return make


def pytest_terminal_summary(terminalreporter):
    """Sandbox tests skipped for want of bubblewrap, Slurm or Ray tests without a cluster, must not pass unnoticed."""
    missing = [r for r in terminalreporter.stats.get("skipped", []) if "BUBBLEWRAP MISSING" in str(r.longrepr)]
    if missing:
        terminalreporter.write_sep(
            "!",
            f"{len(missing)} SANDBOX TESTS DID NOT RUN: bubblewrap is missing (apt-get install -y bubblewrap)",
            red=True,
            bold=True,
        )
    no_chromium = [r for r in terminalreporter.stats.get("skipped", []) if "CHROMIUM MISSING" in str(r.longrepr)]
    if no_chromium:  # tests/test_pareto_browser.py: the interactive front is not shown to draw its intervals
        msg = f"{len(no_chromium)} BROWSER TESTS DID NOT RUN: chromium is missing (apt-get install -y chromium)"
        terminalreporter.write_sep("!", msg, red=True, bold=True)
    no_ray = [r for r in terminalreporter.stats.get("skipped", []) if "RAY UNAVAILABLE" in str(r.longrepr)]
    if no_ray:  # why: ray not installed, or its daemons could not start (tests/test_ray.py)
        terminalreporter.write_sep("!", f"{len(no_ray)} RAY TESTS DID NOT RUN", red=True, bold=True)
        terminalreporter.write_line(str(no_ray[0].longrepr[-1]).splitlines()[0], red=True)
    no_slurm = [r for r in terminalreporter.stats.get("skipped", []) if "SLURM UNAVAILABLE" in str(r.longrepr)]
    if no_slurm:  # why: not root, packages missing, a daemon that did not start (tests/helpers/slurm_cluster.py)
        terminalreporter.write_sep("!", f"{len(no_slurm)} SLURM TESTS DID NOT RUN", red=True, bold=True)
        terminalreporter.write_line(str(no_slurm[0].longrepr[-1]).splitlines()[0], red=True)
