"""Where the repository is, found from this file (never from the working directory).

`REPO_ROOT` backs the Hydra `paths` group (`conf/paths/default.yaml`: `root_dir: ${repo_root:}`; each entry
point calls `register_path_resolver` before composing) and `resolve_path`, which finds the repo-relative data
paths that eval configs keep (a run's name hashes its eval config, so those stay relative and portable).
Plain Python, no third-party imports beyond OmegaConf, so harness and evals entry points may both use it.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]


def register_path_resolver() -> None:
    """`${repo_root:}` in configs: the absolute repo root (idempotent)."""
    if not OmegaConf.has_resolver("repo_root"):
        OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))


def resolve_path(path: str | Path) -> Path:
    """A data path as given when it exists (absolute, or relative to the working directory), else the same
    relative path under the repo root when that exists there (the rule model paths follow too); unchanged
    otherwise, so the caller's "not found" message names what was asked for."""
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    return REPO_ROOT / p if (REPO_ROOT / p).exists() else p
