"""Where the repository is, found from this file (never from the working directory), and the one rule for
model references (hub id or local folder) and data paths.

`REPO_ROOT` backs the Hydra `paths` group (`conf/paths/default.yaml`: `root_dir: ${repo_root:}`; each entry
point calls `register_path_resolver` before composing) and `resolve_path`, which finds the repo-relative data
paths that eval configs keep (a run's name hashes its eval config, so those stay relative and portable).
Plain Python and OmegaConf only, so every package may use it.
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


def resolve_model_ref(ref: str, what: str) -> str:
    """A hub id as is, or a local folder as an existing path (relative ones may be relative to the repo root).

    Fails fast on a local-looking path that does not exist, before any weights load. Hub ids have one "/".
    """
    if not ref:
        raise ValueError(f"{what}: empty model id/path")
    path = Path(ref).expanduser()
    if path.is_dir():
        return str(path)
    if not path.is_absolute() and (REPO_ROOT / path).is_dir():
        return str(REPO_ROOT / path)
    if ref.startswith(("/", "./", "../", "~")) or ref.count("/") >= 2:
        raise FileNotFoundError(f"{what}: local model folder {ref!r} does not exist (not even under {REPO_ROOT})")
    return ref
