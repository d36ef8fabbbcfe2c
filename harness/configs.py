"""Config registration and the checks that run before any model loads.

Sampler base nodes (`sampler=entropy_bound|confidence_topk|confidence_threshold`) are generated from
the dataclasses in `samplers.config`, so every knob and its default is defined once; YAML presets in
`conf/sampler/` only state what differs. `run_name` derives a readable, unique run-dir name from the
config values (bd3lms-style), which is also what makes re-running a config resume it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from contract.decoding import DecoderKind
from contract.paths import register_path_resolver, resolve_model_ref
from samplers.config import ConfidenceThresholdConfig, ConfidenceTopKConfig, EntropyBoundConfig
from samplers.knobs import changed_knobs, run_name_part

SAMPLERS = {cls.name: cls for cls in (EntropyBoundConfig, ConfidenceTopKConfig, ConfidenceThresholdConfig)}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def register_configs() -> None:
    cs = ConfigStore.instance()
    for name, cls in SAMPLERS.items():
        node = {"_target_": f"{cls.__module__}.{cls.__qualname__}", **asdict(cls())}
        cs.store(group="sampler", name=name, node=node)
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)
    register_path_resolver()  # ${repo_root:} for conf/paths/


def model_kind(model: DictConfig) -> DecoderKind:
    """The kind of decoder a model config builds, read from its class's `kind` (never from names)."""
    from hydra.utils import get_class

    target = model.get("_target_")
    if not target:
        raise ValueError("model._target_: missing (the adapter or decoder class to build)")
    return DecoderKind(getattr(get_class(str(target)), "kind", DecoderKind.AR))


def run_name(
    model: DictConfig, sampler: DictConfig, ev: DictConfig, seed: int, batch_size: int | str | None = None
) -> str:
    """`<model>__<sampler knobs that differ from defaults>__<eval>__s<seed>__bs<batch>__<hash of all of them>`.

    The batch size is part of the identity: it does not change a sample's tokens, but it changes the run's
    throughput and latency figures, so runs at different batch sizes must not share a directory."""
    m = OmegaConf.to_container(model, resolve=True)
    s = OmegaConf.to_container(sampler, resolve=True)
    e = OmegaConf.to_container(ev, resolve=True)
    parts = [str(m.get("name", "model"))]
    if model_kind(model) == DecoderKind.DIFFUSION:
        cls = SAMPLERS.get(str(s.get("name")))
        defaults = asdict(cls()) if cls else {}
        knobs = [run_name_part(k, v) for k, v in changed_knobs(s, defaults).items()]
        parts.append("-".join([str(s.get("name"))] + knobs))
    parts += [str(e.get("name", "eval")), f"s{seed}"]
    identity: list = [m, s, e, seed]
    if batch_size is not None:
        parts.append(f"bs{batch_size}")
        identity.append(batch_size)
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return re.sub(r"[^\w.=+-]", "_", "__".join(parts)) + f"__{digest}"


def check_model_path(model: DictConfig) -> None:
    """Fail fast on a model path that is neither a local folder (as given, or under the repo root: the one rule
    every adapter loads by) nor a hub id ("org/name"), or a hub id that offline mode cannot load."""
    path = model.get("path")
    if not path:
        raise ValueError("model.path: missing (a local checkpoint folder or a hub id such as org/name)")
    hint = " (build tiny models with `make tiny-models`)" if "tiny" in str(path) else ""
    try:
        resolved = resolve_model_ref(str(path), "model.path")
    except FileNotFoundError as e:
        raise ValueError(f"{e}{hint}") from None
    p = Path(resolved)
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ValueError(f"model.path: {p} exists but holds no config.json (not a transformers checkpoint)")
        return
    if not HUB_ID.match(str(path)):
        raise ValueError(f"model.path: {path} does not exist locally and is not a hub id{hint}")
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(str(path), "config.json", revision=model.get("revision")), str):
            raise ValueError(
                f"model.path: {path} is neither a local folder nor a cached hub model, and "
                f"HF_HUB_OFFLINE=1 forbids downloading it{hint}"
            )
