"""What determines a run's samples besides its config: fingerprints stored with the run and checked on resume.

The run name hashes the config, but the same config can point at different inputs over time: a checkpoint
retrained into the same folder, a hub id without a pinned revision, an edited data file. The model is
fingerprinted here before it loads (local folders: every file's name, size and modification time, and the
bytes of the small ones such as config and tokenizer; hub ids: the requested revision, and after loading the
commit actually loaded), and so is the release of a decoder that is not ours (`decoder=diffusers`); every stored
sample carries the hash of the item it was made from (`item_sha`), so edited prompts or a reordered data file
are caught sample by sample (`harness.runner.evaluate`, lm-eval's bridge).
"""

from __future__ import annotations

import hashlib
from importlib.metadata import version
from pathlib import Path
from typing import Any

from contract.paths import resolve_model_ref

SMALL_FILE = 1 << 20  # files up to this size are hashed by content (configs, tokenizers)


def folder_fingerprint(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        if st.st_size <= SMALL_FILE:
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def model_identity(model_cfg: Any) -> dict[str, Any]:
    """Fingerprints of the weights a model config loads (main model and draft, when there is one)."""
    out: dict[str, Any] = {}
    for key in ("path", "draft_path", "tokenizer", "adapter"):
        ref = model_cfg.get(key)
        if not ref:
            continue
        resolved = Path(resolve_model_ref(str(ref), f"model.{key}"))
        if resolved.is_dir():
            out[f"model.{key}"] = f"{ref} files {folder_fingerprint(resolved)}"
        else:
            out[f"model.{key}"] = f"{ref} revision {model_cfg.get('revision') or 'unpinned'}"
    return out


def decoder_identity(decoder_cfg: Any) -> dict[str, Any]:
    """The release of a decoder that is not ours (`decoder=diffusers`: diffusers' version), so a resume under
    another release refuses rather than mix; empty for our engine (whose code the run name does not pin either)."""
    if decoder_cfg is not None and decoder_cfg.get("name") == "diffusers":
        return {"decoder.diffusers": version("diffusers")}
    return {}


def loaded_commit(model: Any) -> str | None:
    """The hub commit transformers loaded (None for local folders)."""
    inner = getattr(model, "model", model)
    return getattr(getattr(inner, "config", None), "_commit_hash", None)
