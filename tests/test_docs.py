"""The README and docs/ cannot go stale silently: every link, module and code path they name must exist.

A move of a module (or a deleted docs page) fails here, naming the file and line that still points at the old
place. Checked: README.md stays at most 200 lines (a newcomer's page; reference material lives in docs/); every
docs/*.md page is linked from the README's docs index; every relative Markdown link resolves to a file (and its
#anchor to a heading); every `python -m X` names an importable module; every dotted path under a project package
(`harness.engine.decode`, `models.planning.memory.estimate_decode_peak`) names a module, or a name that module defines
or
exports; every cited test function and every repository path to a source or data file or folder
(`harness/engine/decode.py`, `conf/sampler/`) exists. Pure text and `ast`: nothing is imported, so the check runs
in about a second.
"""

from __future__ import annotations

import ast
import importlib.machinery
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 200
DOCS_INDEX_HEADING = "## Documentation"
PACKAGES = ("harness", "bench", "models", "samplers", "evals", "contract")
PATH_ROOTS = (*PACKAGES, "conf", "tests", "hydra_plugins", "docs")
# Paths the docs name that are meant to be absent from a clone: the user creates them (git-ignored).
USER_CREATED = {"conf/local/default.yaml"}
# A walk-through's files (docs/extending.md): a code block whose first line is `# file: <path>` is one the reader
# writes (tests/test_extending_docs.py builds each), so neither its path nor its module names exist in a clone.
FILE_MARK = re.compile(r"```\w*\n# file: (\S+)\n")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PYTHON_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
TEST_ID = re.compile(r"(tests/[\w/]+\.py::\w+)")
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(PATH_ROOTS)})/[\w.*/-]*)")


def _lines(path: Path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        yield f"{path.relative_to(REPO)}:{number}", line


def _module_file(dotted: str) -> Path | None:
    """The file of a project module or package, or None when there is none."""
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines at its top level (defs, classes, assignments) or exports in `__all__`, read with
    `ast`. A name it merely imports does not count: the docs must name the module that defines it, so moving the
    definition fails here even while an old import keeps the name reachable."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                names.update(ast.literal_eval(node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


@cache
def walkthrough_files() -> frozenset[str]:
    """The files docs pages have the reader write (`FILE_MARK`)."""
    return frozenset(m for page in DOCS for m in FILE_MARK.findall(page.read_text(encoding="utf-8")))


def dotted_path_problem(dotted: str) -> str | None:
    """Why `dotted` names nothing in the project (None when it does): the longest prefix that is a module must
    exist below the top-level package (or be a walk-through's file), and a remaining part must start with a name
    that module defines."""
    parts = dotted.split(".")
    if any("/".join(parts[:end]) + ".py" in walkthrough_files() for end in range(1, len(parts) + 1)):
        return None
    for end in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:end]))
        if path is None:
            continue
        if end == len(parts) or parts[end] in _top_level_names(path):
            return None
        return f"{'.'.join(parts[:end])} has no top-level name {parts[end]!r}"
    return f"no module {parts[0]}"


def python_m_problem(module: str) -> str | None:
    """Why `python -m module` would fail to find the module (None when it is found)."""
    if module.split(".")[0] in (*PACKAGES, "tests"):
        return None if _module_file(module) else f"no module {module}"
    # sys.path's finder alone: `importlib.util.find_spec("pip")` would run setuptools' distutils hook on the
    # meta path, which then stops serving distutils for the rest of the process and breaks inductor's CPU build
    found = importlib.machinery.PathFinder.find_spec(module.split(".")[0])
    return None if found else f"{module} is not installed"


def cited_test_problem(test_id: str) -> str | None:
    """Why a `tests/test_x.py::name` the docs cite names no test function (None when it does)."""
    file, name = test_id.split("::")
    path = REPO / file
    return None if path.is_file() and name in _top_level_names(path) else f"no test {test_id}"


def repo_path_problem(path: str) -> str | None:
    """Why a repository path named in the docs does not exist (None when it does, or is not a source path)."""
    path = path.rstrip(".,:;")
    if (
        not (path.endswith(("/", ".py", ".yaml", ".md", ".json", ".jsonl", ".csv")) or "*" in path)
        or path in USER_CREATED | walkthrough_files()
    ):
        return None
    return None if any(REPO.glob(path.rstrip("/"))) else f"no such path {path}"


def _problems(pattern: re.Pattern, check) -> list[str]:
    found = []
    for page in PAGES:
        for where, line in _lines(page):
            for match in pattern.finditer(line):
                problem = check(match.group(1))
                if problem:
                    found.append(f"{where}: {problem}")
    return found


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_every_docs_page_is_in_the_readme_index():
    text = README.read_text(encoding="utf-8")
    assert DOCS_INDEX_HEADING in text, f"README.md has no {DOCS_INDEX_HEADING!r} section"
    index = text.split(DOCS_INDEX_HEADING, 1)[1].split("\n## ", 1)[0]
    linked = {Path(target).name for target in LINK.findall(index) if target.startswith("docs/")}
    missing = [page.name for page in DOCS if page.name not in linked]
    assert DOCS and not missing, f"docs pages missing from the README's docs index: {missing}"


@cache
def _anchors(page: Path) -> frozenset[str]:
    """The heading anchors GitHub gives a Markdown page (lower case, punctuation dropped, spaces to hyphens)."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (heading := re.match(r"#+ (.*)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-"))
    return frozenset(anchors)


def link_problem(page: Path, target: str) -> str | None:
    """Why a Markdown link on `page` leads nowhere (None when its file, and its #anchor on a .md page, exist)."""
    if re.match(r"[a-z]+:", target):
        return None
    file, _, anchor = target.partition("#")
    path = (page.parent / file) if file else page
    if not path.exists():
        return f"broken link {target}"
    if anchor and path.suffix == ".md" and anchor not in _anchors(path):
        return f"no heading for #{anchor} in {path.relative_to(REPO)}"
    return None


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for where, line in _lines(page):
            broken += [f"{where}: {p}" for target in LINK.findall(line) if (p := link_problem(page, target))]
    assert not broken, "\n".join(broken)


def test_python_m_modules_exist():
    problems = _problems(PYTHON_M, python_m_problem)
    assert not problems, "\n".join(problems)


def test_checking_a_python_m_module_leaves_setuptools_importable():
    """The check runs in the test process, which later builds inductor's CPU kernels (torch imports setuptools)."""
    code = "from tests.test_docs import python_m_problem as p; assert p('pip') is None; import setuptools"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_dotted_module_paths_exist():
    problems = _problems(DOTTED, dotted_path_problem)
    assert not problems, "\n".join(problems)


def test_repository_paths_exist():
    problems = _problems(REPO_PATH, repo_path_problem)
    assert not problems, "\n".join(problems)


def test_cited_test_functions_exist():
    problems = _problems(TEST_ID, cited_test_problem)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("harness.engine.decode", True),
        ("harness.engine.decode.BlockDiffusionDecoder", True),
        ("harness.engine", True),
        ("harness.search", False),  # moved to harness.analysis.search
        ("harness.engine.decode.no_such_name", False),
        ("harness.engine.decode.sampler_step", False),  # imported there; defined in samplers.sampler_step
        ("samplers.sampler_step.sampler_step", True),
        ("evals.sudoku.train.TrainConfig", True),  # defined in evals.sudoku.recipe, exported in train's __all__
        ("harness.aggregate", False),  # moved to harness.analysis.aggregate
    ],
)
def test_the_dotted_check_tells_a_moved_module(text, ok):
    assert (dotted_path_problem(text) is None) is ok


def test_the_path_and_module_checks_fail_on_missing_targets():
    assert repo_path_problem("harness/engine/decode.py") is None
    assert repo_path_problem("harness/decode.py") == "no such path harness/decode.py"
    assert repo_path_problem("conf/sampler/*.yaml") is None
    assert repo_path_problem("samplers/left_to_right.py") is None  # docs/extending.md's reader writes it
    assert dotted_path_problem("samplers.left_to_right.LeftToRightConfig") is None
    assert dotted_path_problem("samplers.left_to_rightx") == "samplers has no top-level name 'left_to_rightx'"
    assert link_problem(README, "docs/engine.md#python-api-notebooks") is None
    assert link_problem(README, "docs/engine.md#no-such-heading") == "no heading for #no-such-heading in docs/engine.md"
    assert link_problem(README, "docs/gone.md") == "broken link docs/gone.md"
    assert cited_test_problem("tests/test_engine.py::test_the_step_compiles_whole_on_cpu") is None
    assert cited_test_problem("tests/test_engine.py::test_gone") == "no test tests/test_engine.py::test_gone"
    assert python_m_problem("harness.run") is None
    assert python_m_problem("harness.aggregate") == "no module harness.aggregate"
    assert python_m_problem("pytest") is None
