"""Which request types an lm-eval task sends, read from its YAML files without indexing or loading any task.

lm-eval's TaskManager indexes every built-in task (~13 s) and loading a task reads its dataset; a composition-time
check needs neither. Here the task folders (`include_path` first, then lm-eval's own) are scanned for the names each
YAML defines (`task:`, `group:`, `tag:`), and a name resolves to its files: a group to its members, a tag to its
tagged tasks, a task to its `output_type` (following `include:`; lm-eval's default is `generate_until`).
`multiple_choice` and `loglikelihood` tasks send loglikelihood requests only: no request of theirs reaches a sampler.
The same files say which hub data set each task reads (`dataset_path`), checked before a model loads (offline).
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


def _field(path: Path, key: str, depth: int = 0):
    """A task YAML's `key`, following its `include:` chain (the including file's own value wins); None if unset."""
    data = _load(path)
    if data.get(key) is not None:
        return data[key]
    inc = data.get("include")
    if isinstance(inc, str) and depth < 8:
        target = Path(inc) if Path(inc).is_absolute() else path.parent / inc
        if target.is_file():
            return _field(target, key, depth + 1)
    return None


def _output_type(path: Path) -> str:
    return str(_field(path, "output_type") or "generate_until")  # lm-eval's default


def _resolve(name: str, index: dict[str, list[Path]], seen: set[str]) -> dict[str, Path]:
    """{task name: its YAML} of every task `name` stands for (itself, a group's members, a tag's tasks)."""
    if name in seen:
        return {}
    seen.add(name)
    out: dict[str, Path] = {}
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
            out.setdefault(str(data.get("task", name)), path)
        if out and data.get("task") == name:
            break  # the first folder's definition wins, as include_path overrides lm-eval's own
    return out


def task_files(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> dict[str, dict]:
    """{requested name: {task: its YAML file}}; an unknown name maps to {} (lm-eval itself refuses it later)."""
    folders = [*map(str, include_path)] + ([str(_lmeval_tasks_dir())] if include_defaults else [])
    index = _index(tuple(folders))
    return {t: _resolve(t, index, set()) for t in tasks}


def output_types(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> dict[str, dict]:
    """{requested name: {task: output_type}}; an unknown name maps to {} (lm-eval itself refuses it later)."""
    found = task_files(tasks, include_path, include_defaults)
    return {t: {task: _output_type(path) for task, path in files.items()} for t, files in found.items()}


def likelihood_only(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> list[str]:
    """The requested names all of whose tasks send loglikelihood requests only (none reaches a sampler)."""
    types = output_types(tasks, include_path, include_defaults)
    return [t for t, found in types.items() if found and set(found.values()) <= LIKELIHOOD_TYPES]


# `dataset_path` values that name a `datasets` loader of local files (with `dataset_kwargs.data_files`), not a hub set
LOCAL_LOADERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "sql", "webdataset"})


def hub_dataset_of(path: Path) -> str | None:
    """The hub data set a task YAML reads (`dataset_path`, through its `include:` chain), or None: no dataset_path
    (a Python task), a local loader (`json` + `data_files`), or a local folder."""
    ds = _field(path, "dataset_path")
    if not isinstance(ds, str) or not ds or ds in LOCAL_LOADERS:
        return None
    if Path(ds).expanduser().exists() or (path.parent / ds).exists():
        return None
    return ds


def task_hub_datasets(tasks: list[str], include_path: list[str] = (), include_defaults: bool = True) -> dict:
    """{hub data set id: [the tasks that read it]} for every task the requested names stand for, as the YAMLs
    say (torch-free, nothing loaded): what a run needs from the hub, to check before any model loads."""
    out: dict[str, list[str]] = {}
    for name in tasks:
        files = task_files([name], include_path, include_defaults)[name]
        if not files and Path(name).is_file():  # lm-eval also takes a task YAML's path
            files = {Path(name).stem: Path(name)}
        for task, path in files.items():
            if ds := hub_dataset_of(path):
                out.setdefault(ds, [])
                if task not in out[ds]:
                    out[ds].append(task)
    return out
