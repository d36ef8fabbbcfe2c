"""Which request types an lm-eval task sends, read from its YAML files without indexing or loading any task.

lm-eval's TaskManager indexes every built-in task (~13 s) and loading a task reads its dataset; a composition-time
check needs neither. Here the task folders (`include_path` first, then lm-eval's own) are scanned for the names each
YAML defines (`task:`, `group:`, `tag:`), and a name resolves to its files: a group to its members, a tag to its
tagged tasks, a task to its `output_type` (following `include:`; lm-eval's default is `generate_until`).
`multiple_choice` and `loglikelihood` tasks send loglikelihood requests only: no request of theirs reaches a sampler.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

LIKELIHOOD_TYPES = frozenset({"multiple_choice", "loglikelihood", "loglikelihood_rolling"})
_NAME = re.compile(r'^"?(task|group|tag)"?\s*:\s*"?([\w.\-]+)"?\s*$', re.M)
_TAG_LIST = re.compile(r'^"?tag"?\s*:\s*\n((?:[ \t]+-[ \t]*\S+[ \t]*\n?)+)', re.M)


class _Loader(yaml.SafeLoader):
    """lm-eval YAMLs carry `!function` tags; their values are not needed here."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _lmeval_tasks_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("lm_eval")
    return Path(spec.origin).parent / "tasks"


@functools.lru_cache(maxsize=8)
def _index(folders: tuple[str, ...]) -> dict[str, list[Path]]:
    """name -> the YAML files that define it (as task, group or tag), first folder first."""
    index: dict[str, list[Path]] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.yaml")):
            text = path.read_text(errors="ignore")
            names = [n for _, n in _NAME.findall(text)]
            for block in _TAG_LIST.findall(text):
                names += [line.strip().lstrip("-").strip().strip("\"'") for line in block.splitlines() if line.strip()]
            for n in names:
                index.setdefault(n, []).append(path)
    return index


def _load(path: Path) -> dict:
    data = yaml.load(path.read_text(errors="ignore"), Loader=_Loader)
    return data if isinstance(data, dict) else {}


def _output_type(path: Path, depth: int = 0) -> str:
    data = _load(path)
    if data.get("output_type"):
        return str(data["output_type"])
    inc = data.get("include")
    if inc and depth < 8:
        target = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        if target.is_file():
            return _output_type(target, depth + 1)
    return "generate_until"


def _resolve(name: str, index: dict[str, list[Path]], seen: set[str]) -> dict[str, str]:
    """{task name: output_type} of every task `name` stands for (itself, a group's members, a tag's tasks)."""
    if name in seen:
        return {}
    seen.add(name)
    out: dict[str, str] = {}
    for path in index.get(name, []):
        data = _load(path)
        tags = data.get("tag")
        tags = [tags] if isinstance(tags, str) else list(tags or [])
        if data.get("group") == name:
            members = data.get("task") or []
            for m in members if isinstance(members, list) else [members]:
                sub = m.get("task") if isinstance(m, dict) else m
                if isinstance(sub, str):
                    out.update(_resolve(sub, index, seen))
        elif data.get("task") == name or name in tags:
            out[str(data.get("task", name))] = _output_type(path)
        if out and data.get("task") == name:
            break  # the first folder's definition wins, as include_path overrides lm-eval's own
    return out


def output_types(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> dict[str, dict]:
    """{requested name: {task: output_type}}; an unknown name maps to {} (lm-eval itself refuses it later)."""
    folders = [*map(str, include_path)] + ([str(_lmeval_tasks_dir())] if include_defaults else [])
    index = _index(tuple(folders))
    return {t: _resolve(t, index, set()) for t in tasks}


def likelihood_only(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> list[str]:
    """The requested names all of whose tasks send loglikelihood requests only (none reaches a sampler)."""
    types = output_types(tasks, include_path, include_defaults)
    return [t for t, found in types.items() if found and set(found.values()) <= LIKELIHOOD_TYPES]
