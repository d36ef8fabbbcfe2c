"""The import graph: packages import only downwards, and no project module takes part in an import cycle.

Layers, lowest first: contract < samplers < models < evals < harness < hydra_plugins < bench, and inside them the
subpackages: harness.engine < harness.runner < harness.launch < harness.analysis < harness.figures <
harness.tracking < the entry points at harness/'s top (run, api, pareto, films, train, lmeval, ...); bench.cpu <
bench.gpu. A module may import its own layer and any lower one, never a higher one. Every `import` / `from ...
import` in the project's packages (and our Hydra plugins, `hydra_plugins/`) counts, including imports inside
functions (a lazy import is still a dependency); relative imports are resolved. A project module loaded by name
counts too: `importlib.import_module(NAME)`, `__import__(NAME)`, `runpy.run_module(NAME)`, where NAME is a string
literal, a module-level string constant, or an item of a module-level dict of strings (`_WHERE[name]`, the lazy
`__getattr__` of a package: each value is an edge). Excluded: imports under `if TYPE_CHECKING:` (never executed;
annotations only), names built at run time and Hydra `_target_` strings (config, not code), and third-party
modules. `from pkg import name` is an edge to
the module `pkg.name` when that is a project module, else to `pkg` (its `__init__`); the implicit import of
parent packages is not counted, so a package `__init__` re-exporting its submodules makes no cycle by itself.

And sizes: no source file over 450 lines, no function in the packages over 80 (ruff has no such rule), except
those `EXEMPT_FUNCTIONS` names with the reason; an exemption that no longer applies fails too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "samplers", "models", "evals", "harness", "hydra_plugins", "bench")
LAYERS = (  # lowest first; a module belongs to the longest layer its name starts with
    "contract",
    "samplers",
    "models",
    "evals",
    "harness.engine",
    "harness.runner",
    "harness.launch",
    "harness.analysis",
    "harness.figures",
    "harness.tracking",
    "harness",
    "hydra_plugins",  # Hydra's sweeper and launchers of our own: they drive harness.launch / harness.analysis
    "bench.cpu",
    "bench.gpu",
    "bench",
)


@dataclass(frozen=True)
class Edge:
    src: str  # importing module
    dst: str  # imported project module
    file: str  # path relative to the scanned root
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.src} -> {self.dst}"


def project_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the given top-level packages (absent ones skipped)."""
    mods = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


LOADERS = {"import_module", "__import__", "run_module"}  # importlib's, the builtin, runpy's: a module by name


def _string_constants(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level `NAME = "a.b"` and `NAME = {key: "a.b", ...}` (every value a string): the names they bind."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = node.value.values if isinstance(node.value, ast.Dict) else [node.value]
            if values and all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values):
                found[node.targets[0].id] = [v.value for v in values]
    return found


def loaded_names(call: ast.Call, constants: dict[str, list[str]]) -> list[str]:
    """The module names a `LOADERS` call loads: its first argument as a literal, a constant, or a constant dict's
    item (every value); [] for any other call, or a name built at run time."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name not in LOADERS or not call.args:
        return []
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Subscript):
        arg = arg.value
    return constants.get(arg.id, []) if isinstance(arg, ast.Name) else []


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node and every call (for `loaded_names`), skipping the bodies of `if TYPE_CHECKING:`
    (their `else:` still counts)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_edges(root: Path, packages=PACKAGES) -> list[Edge]:
    mods = project_modules(root, packages)

    def owner(name: str) -> str | None:  # the longest project module that `name` is or lies inside
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges = set()
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        constants = _string_constants(tree)
        for node in _imports(tree):
            if isinstance(node, ast.Call):
                targets = [owner(name) for name in loaded_names(node, constants) if not name.startswith(".")]
            elif isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg_parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    keep = len(pkg_parts) - (node.level - 1)
                    base = ".".join(pkg_parts[: max(keep, 0)] + ([node.module] if node.module else []))
                targets = [
                    owner(f"{base}.{a.name}" if base else a.name) if a.name != "*" else owner(base) for a in node.names
                ]
            edges.update(Edge(mod, t, rel, node.lineno) for t in targets if t and t != mod)
    return sorted(edges, key=lambda e: (e.file, e.line, e.dst))


def layer_of(module: str) -> int:
    """The index of the longest layer that is `module` or contains it."""
    return max(
        (i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + ".")),
        key=lambda i: len(LAYERS[i]),
    )


def upward_imports(edges: list[Edge]) -> list[Edge]:
    return [e for e in edges if layer_of(e.src) < layer_of(e.dst)]


def import_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """Strongly connected components of the module graph with more than one module, as their internal edges."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred modules, recursion depth is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [[e for e in edges if e.src in comp and e.dst in comp] for comp in sccs]


def _report(title: str, lines: list[str]) -> str:
    return f"{title}:\n  " + "\n  ".join(lines)


# -- the real tree ---------------------------------------------------------------------------------------------


def test_no_import_from_a_lower_package_to_a_higher_one():
    bad = upward_imports(import_edges(REPO))
    if bad:
        pytest.fail(
            _report(f"upward imports (layers, lowest first: {' < '.join(LAYERS)})", [str(e) for e in bad]),
            pytrace=False,
        )


def test_no_import_cycles_between_modules():
    cycles = import_cycles(import_edges(REPO))
    if cycles:
        pytest.fail(
            _report("import cycles (one line per cycle)", [" | ".join(str(e) for e in c) for c in cycles]),
            pytrace=False,
        )


def test_the_scan_sees_the_project():
    """Guards the checks above against passing because they scanned nothing (moved packages, wrong root)."""
    mods = project_modules(REPO)
    assert {"harness.run", "contract.records", "samplers.config", "evals.base", "bench.cpu.run_all"} <= set(mods)
    assert {layer for layer in LAYERS if "." in layer} <= set(mods)  # every sub-layer is a package that exists
    assert len(import_edges(REPO)) > 50


def test_harness_top_level_holds_only_entry_points():
    """harness/ is read by concern: at most 8 files at its top, the rest in subpackages."""
    top = sorted(p.name for p in (REPO / "harness").glob("*.py"))
    assert len(top) <= 8, top


MAX_LINES = 450  # no source file over this (tests aside): a module is read by concern, at one sitting
NOT_SOURCE = {"tests", "outputs", "multirun", "wandb", "shared"}  # plus every dot-folder (.venv, .git, ...)


def test_no_source_file_is_over_450_lines():
    sizes = {}
    tops = [p for p in REPO.iterdir() if p.name not in NOT_SOURCE and not p.name.startswith(".")]
    paths = [p for top in tops for p in ([top] if top.is_file() else top.rglob("*.py"))]  # never walks .venv
    for path in paths:
        rel = path.relative_to(REPO)
        if path.suffix != ".py" or any(part.startswith(".") for part in rel.parts):
            continue
        sizes[rel.as_posix()] = len(path.read_text(encoding="utf-8").splitlines())
    assert "harness/run.py" in sizes and len(sizes) > 100  # the scan sees the project
    over = [f"{p}: {n} lines" for p, n in sorted(sizes.items()) if n > MAX_LINES]
    if over:
        pytest.fail(_report(f"files over {MAX_LINES} lines (split them by concern)", over), pytrace=False)


def test_sub_layers_order_within_a_package():
    assert layer_of("harness.engine.decode") < layer_of("harness.runner.store") < layer_of("harness.tracking.loggers")
    assert layer_of("harness.tracking.loggers") < layer_of("harness.run") < layer_of("bench.cpu.common")
    assert layer_of("bench.cpu.common") < layer_of("bench.gpu.gpu_check")
    assert layer_of("harness") == layer_of("harness.run")  # the package itself sits with its entry modules


# -- the checker itself on a synthetic tree ----------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_reports_upward_imports_and_cycles(tmp_path):
    root = _tree(
        tmp_path,
        {
            "contract/__init__.py": "",
            "contract/types.py": "import os\nimport torch\n",
            "samplers/__init__.py": "",
            "samplers/a.py": "from contract.types import X\n\ndef f():\n    from models import m1\n",  # lazy, upward
            "models/__init__.py": "",
            "models/m1.py": "from . import m2\n",
            "models/m2.py": "def g():\n    import models.m1.sub\n",  # cycle m1 -> m2 -> m1 (through a lazy import)
            "models/m3.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.h import H\n"
            "else:\n    from contract import types\n",  # the TYPE_CHECKING import is excluded, its else: is not
            "models/sub/__init__.py": "",
            "models/sub/deep.py": "from ..m1 import thing\nfrom .. import m3\n",  # relative, two levels
            "harness/__init__.py": "from .h import H\n",
            "harness/h.py": "from harness import util\nfrom models.m3 import *\n",
            "harness/util.py": "import harness\n",  # util -> harness (__init__) -> h -> util
        },
    )
    edges = import_edges(root)
    assert {str(e) for e in upward_imports(edges)} == {"samplers/a.py:4: samplers.a -> models.m1"}
    cycles = sorted(sorted(str(e) for e in c) for c in import_cycles(edges))
    assert cycles == [
        [
            "harness/__init__.py:1: harness -> harness.h",
            "harness/h.py:1: harness.h -> harness.util",
            "harness/util.py:1: harness.util -> harness",
        ],
        ["models/m1.py:1: models.m1 -> models.m2", "models/m2.py:2: models.m2 -> models.m1"],
    ]
    assert not any(e.dst.startswith("harness") for e in edges if e.src == "models.m3")  # TYPE_CHECKING skipped
    assert {e.dst for e in edges if e.src in ("models.m3", "samplers.a")} == {"contract.types", "models.m1"}
    assert {e.dst for e in edges if e.src == "models.sub.deep"} == {"models.m1", "models.m3"}


def test_checker_reads_modules_loaded_by_name(tmp_path):
    """`importlib.import_module` / `__import__` / `runpy.run_module` of a literal, a constant or a constant dict's
    item are edges (issue 54: `python -m evals.lmeval` loaded `harness.runner.lmeval_cli` by name); names built at
    run time are not; hydra_plugins/ is scanned, above harness."""
    root = _tree(
        tmp_path,
        {
            "contract/__init__.py": "",
            "contract/c.py": "import importlib\nMOD = 'samplers.s'\ndef f():\n    importlib.import_module(MOD)\n",
            "samplers/__init__.py": "",
            "samplers/s.py": "from importlib import import_module\nimport_module('models.m')\n",
            "models/__init__.py": "import importlib\n_WHERE = {'A': 'models.m', 'B': 'evals.e'}\n"
            "def __getattr__(name):\n    return importlib.import_module(_WHERE[name])\n",
            "models/m.py": "import runpy\ndef g(x):\n    __import__(f'models.{x}')\n"  # built at run time: no edge
            "    runpy.run_module('harness.h')\n",
            "evals/__init__.py": "",
            "evals/e.py": "import importlib\nimportlib.import_module('json')\n",  # third party: no edge
            "harness/__init__.py": "",
            "harness/h.py": "",
            "hydra_plugins/p/__init__.py": "",
            "hydra_plugins/p/sweeper.py": "from harness import h\nfrom hydra_plugins.other.x import Y\n"  # not ours
            "import bench.b\n",
            "bench/__init__.py": "",
            "bench/b.py": "",
        },
    )
    edges = import_edges(root)
    assert {str(e) for e in upward_imports(edges)} == {
        "contract/c.py:4: contract.c -> samplers.s",
        "samplers/s.py:2: samplers.s -> models.m",
        "models/__init__.py:4: models -> evals.e",
        "models/m.py:4: models.m -> harness.h",
        "hydra_plugins/p/sweeper.py:3: hydra_plugins.p.sweeper -> bench.b",
    }
    assert {e.dst for e in edges if e.src == "hydra_plugins.p.sweeper"} == {"harness.h", "bench.b"}
    assert {e.dst for e in edges if e.src == "models"} == {"models.m", "evals.e"}


def test_checker_passes_a_clean_tree(tmp_path):
    root = _tree(
        tmp_path,
        {
            "samplers/__init__.py": "from .a import A\n",
            "samplers/a.py": "import numpy\nA = 1\n",
            "harness/run.py": "import samplers\nfrom samplers.a import A\nfrom bench import b\n",  # no bench package
        },
    )
    edges = import_edges(root)
    assert [str(e) for e in edges] == [
        "harness/run.py:1: harness.run -> samplers",
        "harness/run.py:2: harness.run -> samplers.a",
        "samplers/__init__.py:1: samplers -> samplers.a",
    ]
    assert upward_imports(edges) == [] and import_cycles(edges) == []


# -- function length -----------------------------------------------------------------------------------------

MAX_FUNCTION_LINES = 80  # def line to last line (decorators aside); ruff has no such rule, so this test is it
EXEMPT_FUNCTIONS = {  # "path::qualname": why it stays long; the test fails when an entry no longer applies
    "samplers/triton_draw.py::_fused_draw_kernel": "one Triton @jit kernel is one compiled program: a split "
    "would add device calls or inline helpers the compiler then re-fuses",
}


def _functions(node: ast.AST, prefix: str = ""):
    """(qualname, length in lines) for every function under `node`, methods and nested functions included."""
    for child in ast.iter_child_nodes(node):
        name = prefix
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield name, child.end_lineno - child.lineno + 1
            name += "."
        yield from _functions(child, name)


def long_functions(root: Path, packages=PACKAGES, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Map "path::qualname" to its length for every function over `limit` lines (def line to last line,
    decorators aside)."""
    found = {}
    for path in project_modules(root, packages).values():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found.update({f"{rel}::{name}": n for name, n in _functions(tree) if n > limit})
    return found


def function_length_report(long: dict[str, int], exempt: dict[str, str]) -> list[str]:
    """One line per function over the limit that is not exempt, and per exemption that no longer applies."""
    over = [f"{key}: {n} lines" for key, n in sorted(long.items()) if key not in exempt]
    stale = [
        f"{key}: exempt, but gone or now short (remove the exemption)" for key in sorted(exempt) if key not in long
    ]
    return over + stale


def test_no_function_is_over_80_lines():
    bad = function_length_report(long_functions(REPO), EXEMPT_FUNCTIONS)
    if bad:
        pytest.fail(
            _report(f"functions over {MAX_FUNCTION_LINES} lines (split them into named helpers)", bad), pytrace=False
        )


def test_function_length_checker(tmp_path):
    def lines(n: int, indent: int) -> str:
        return (" " * indent + "x = 1\n") * n

    source = (
        f"def short():\n{lines(79, 4)}"  # 80 lines: at the limit, allowed
        f"class C:\n    def meth(self):\n{lines(80, 8)}"  # a method, 81 lines
        f"def outer():\n    def inner():\n{lines(80, 8)}"  # a nested function (81) inside its parent (82)
    )
    root = _tree(tmp_path, {"models/m.py": source})
    assert long_functions(root) == {"models/m.py::C.meth": 81, "models/m.py::outer": 82, "models/m.py::outer.inner": 81}
    exempt = {"models/m.py::outer": "nested helpers", "models/m.py::short": "was long once"}
    assert function_length_report(long_functions(root), exempt) == [
        "models/m.py::C.meth: 81 lines",
        "models/m.py::outer.inner: 81 lines",
        "models/m.py::short: exempt, but gone or now short (remove the exemption)",
    ]
