"""Config registration and the checks that run before any model loads.

Sampler base nodes (`sampler=entropy_bound|confidence_topk|confidence_threshold`) are generated from
the dataclasses in `samplers.config`, so every knob and its default is defined once; YAML presets in
`conf/sampler/` only state what differs. `run_name` derives a readable, unique run-dir name from the
config values (bd3lms-style), which is also what makes re-running a config resume it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import asdict, is_dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from contract.decoding import DecoderKind
from contract.families import Family, family_of_target
from contract.paths import register_path_resolver, resolve_model_ref
from harness.engine.decoders import sampler_group
from samplers.config import VERIFY_KNOBS, ConfidenceThresholdConfig, ConfidenceTopKConfig, EntropyBoundConfig
from samplers.diffusers_config import DIFFUSERS_SAMPLERS
from samplers.knobs import changed_knobs, run_name_part
from samplers.masked import MASKED_SAMPLERS
from samplers.strategies import STRATEGIES
from samplers.token_rule import TOKEN_SAMPLERS

SAMPLERS = {
    **{
        cls.name: cls
        for cls in (EntropyBoundConfig, ConfidenceTopKConfig, ConfidenceThresholdConfig, *DIFFUSERS_SAMPLERS)
    },
    **MASKED_SAMPLERS,
    **TOKEN_SAMPLERS,
    **STRATEGIES,  # the field's strategies (samplers/strategies), each its own rule
}
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
    """The kind of decoder a model config builds: the family registry's answer for a class it names (no import, so
    composing stays torch-free), else the class's own `kind` (imported; a class of the user's own)."""
    target = model.get("_target_")
    if not target:
        raise ValueError("model._target_: missing (the adapter or decoder class to build)")
    if family := family_of_target(str(target)):
        return family.kind
    from hydra.utils import get_class

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
    if m.get("adapter") is None:
        m.pop("adapter", None)  # runs without a LoRA adapter keep the identity they had before the key existed
    if not s.get("stream_after_stable"):
        s.pop("stream_after_stable", None)  # so do runs that do not stream
    for k in ("schedule", "confidence"):  # and masked runs that take the model's own fill schedule and ranking
        if s.get(k, "") is None:
            s.pop(k)
    if s.get("verify", "off") == "off":  # and runs without hybrid verification
        for k in VERIFY_KNOBS:
            s.pop(k, None)
    parts = [str(m.get("name", "model")) + (f"+lora-{Path(str(m['adapter'])).name}" if m.get("adapter") else "")]
    cls = SAMPLERS.get(str(s.get("name")))
    defaults = asdict(cls()) if cls else {}
    knobs = [run_name_part(k, v) for k, v in changed_knobs(s, defaults).items()]
    if s.get("stream_after_stable"):  # not a decoding knob, but its runs record other figures: named apart
        knobs.append(run_name_part("stream_after_stable", s["stream_after_stable"]))
    parts.append("-".join([str(s.get("name"))] + knobs))
    parts += [str(e.get("name", "eval")), f"s{seed}"]
    identity: list = [m, s, e, seed]
    if batch_size is not None:
        parts.append(f"bs{batch_size}")
        identity.append(batch_size)
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return re.sub(r"[^\w.=+-]", "_", "__".join(parts)) + f"__{digest}"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def check_hub_access(repo_id: str, repo_type: str, what: str) -> bool:
    """Fail before any loading when a gated (or private) hub repo would refuse us: no token, or a token
    without the repo's terms accepted. Returns whether nothing could be checked: offline, or the hub cannot be
    reached (the loader then reads the local cache or reports the network error itself)."""
    if not HUB_ID.match(repo_id):
        return False
    if hub_offline():
        return True
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    token = get_token()  # HF_TOKEN, or the token saved by `hf auth login`
    fix = (
        "set HF_TOKEN (or run `hf auth login`)"
        if token is None
        else "the token in use lacks access: accept the terms on the repo's page with that account"
    )
    url = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"
    try:
        HfApi().auth_check(repo_id, repo_type=repo_type, token=token)
    except GatedRepoError:
        raise ValueError(f"{what}: {repo_id} is a gated {repo_type} ({url}); {fix}") from None
    except RepositoryNotFoundError:
        raise ValueError(f"{what}: {repo_id} does not exist or is private ({url}); {fix}") from None
    except Exception:  # no network, hub down: the loader reports it, or reads the cache
        return True
    return False


def cached_hub_dataset(repo_id: str) -> bool:
    """Whether this machine holds a copy of a hub data set: in the hub cache (`datasets--org--name`) or in the
    `datasets` library's own cache (`org___name`), where an offline `load_dataset` finds it."""
    from huggingface_hub import constants

    hub = Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}"
    own = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    return hub.is_dir() or (own / repo_id.replace("/", "___")).is_dir()


def check_thinking_switch(model: DictConfig) -> None:
    """With `enable_thinking` set, load the tokenizer alone (seconds) and check that its chat template reads
    the switch, before the weights load (minutes at 26B)."""
    if model.get("enable_thinking") is None:
        return
    from transformers import AutoTokenizer

    from contract.text import check_thinking_template

    own = model.get("tokenizer")  # a separate tokenizer folder has no revision of its own
    ref = resolve_model_ref(str(own or model.path), "model.tokenizer" if own else "model.path")
    tokenizer = AutoTokenizer.from_pretrained(ref, revision=None if own else model.get("revision"))
    check_thinking_template(tokenizer, model.enable_thinking)


def check_eval_hub_access(ev) -> None:
    """The hub data sets an eval reads (`hub_datasets()`, none for local files): access checked up front, and a set
    that can neither be downloaded (offline, or the hub out of reach) nor read from this machine's cache fails here,
    naming the eval, not after the weights loaded (lm-eval reads its data sets only once the model runs)."""
    hint = getattr(ev, "local_copy_hint", lambda repo: "or point the eval at a local copy (docs/evals.md)")
    check_hub_datasets(getattr(ev, "hub_datasets", list)(), f"eval={ev.name}", hint)


def check_hub_datasets(repos, what: str, hint) -> None:
    """Each hub data set in `repos` readable from here: on the hub (access checked) or in this machine's cache;
    else one line naming it, why, and `hint(repo)` (how to point at a local copy)."""
    for repo in repos:
        if check_hub_access(repo, "dataset", what) and not cached_hub_dataset(repo):
            why = "HF_HUB_OFFLINE=1 forbids downloading it" if hub_offline() else "the hub cannot be reached"
            from huggingface_hub import constants

            raise ValueError(
                f"{what}: the hub data set {repo} is not in this machine's cache ({constants.HF_HUB_CACHE}) and {why}; "
                f"run online once (HF_TOKEN for a gated set), {hint(repo)}"
            )


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
    adapter = model.get("adapter")
    if adapter:  # a LoRA adapter folder (models.loading.lora), checked before the base loads
        try:
            folder = Path(resolve_model_ref(str(adapter), "model.adapter"))
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
        if not (folder / "adapter_config.json").is_file():
            raise ValueError(f"model.adapter: {folder} holds no adapter_config.json (not a LoRA adapter folder)")
    p = Path(resolved)
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ValueError(f"model.path: {p} exists but holds no config.json (not a transformers checkpoint)")
        return
    if not HUB_ID.match(str(path)):
        raise ValueError(f"model.path: {path} does not exist locally and is not a hub id{hint}")
    if hub_offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(str(path), "config.json", revision=model.get("revision")), str):
            raise ValueError(
                f"model.path: {path} is neither a local folder nor a cached hub model, and "
                f"HF_HUB_OFFLINE=1 forbids downloading it{hint}"
            )
    check_hub_access(str(path), "model", "model.path")
    draft = model.get("draft_path")
    if draft and not Path(resolve_model_ref(str(draft), "model.draft_path")).is_dir():
        check_hub_access(str(draft), "model", "model.draft_path")


DECODERS = ("engine", "diffusers")


def check_decoder(cfg: DictConfig, sampler) -> None:
    """`decoder=diffusers` (diffusers' DiffusionGemmaPipeline, `harness.engine.diffusers_decoder`): checked before any
    model loads. Its samplers are diffusers' schedulers (`sampler=diffusers_*`) and ours are the engine's, so the two
    must agree; it decodes a DiffusionGemma model, uncompiled (the adapter's compiled paths are the engine's)."""
    name = str((cfg.get("decoder") or {}).get("name", "engine"))
    if name not in DECODERS:
        raise ValueError(f"decoder: must be one of {DECODERS}, got {name!r}")
    wants = getattr(sampler, "decoder", "engine")
    if name != wants:
        fix = (
            f"choose one of sampler={'|'.join(c.name for c in DIFFUSERS_SAMPLERS)}"
            if name == "diffusers"
            else "add decoder=diffusers"
        )
        raise ValueError(f"sampler={sampler.name} decodes on decoder={wants}, but decoder={name}: {fix}")


def check_decoder_engine(cfg: DictConfig, family: Family) -> None:
    """`decoder=diffusers` once the model's family is known: the family has that engine, uncompiled, installed."""
    name = str((cfg.get("decoder") or {}).get("name", "engine"))
    if name != "diffusers":
        return
    target = cfg.model.get("_target_")
    if name not in family.engines:
        raise ValueError(f"model._target_: decoder=diffusers has no engine for a {family.kind} model ({target})")
    if cfg.model.get("compile"):
        raise ValueError(f"model.compile: decoder=diffusers runs the model uncompiled, got {cfg.model.compile!r}")
    if importlib.util.find_spec("diffusers") is None:
        raise ValueError("decoder=diffusers: diffusers is not installed (pip install --no-deps diffusers==0.42.1)")


def samplers_of(family: Family) -> list[str]:
    """The sampler names a family takes (the listing in errors and the API)."""
    return [n for n, cls in SAMPLERS.items() if sampler_group(cls) == family.sampler_group]


def check_masked_config(model: DictConfig, sampler) -> None:
    """A masked model needs a mask id and a block length (the yaml's, or for a local checkpoint its config /
    tokenizer files), a valid decode layout, a sampler block length that divides the model's, and for a rule with
    the shadow block a layout that runs it. `sampler`: the sampler (instantiated) or its config."""
    from models.loading.masked_checks import DecodeLayout, check_masked_model, shadow_gaps

    attention, context = str(model.get("attention")), str(model.get("context"))
    keys = ("canvas", "block_origin", "schedule", "confidence", "sub_block")
    layout = DecodeLayout(**{k: model[k] for k in keys if k in model})
    check_masked_model(
        attention, context, bool(model.get("shifted_logits")), model.get("block_length"),
        str(model.get("mask_form", "additive")), model.get("forward_kwargs"), layout, model.get("module_attrs"),
        model.get("requires"), model.get("torch_fallbacks"),
        tail=str(model.get("tail", "visible")),
    )  # fmt: skip
    found = _checkpoint_fields(model)
    mask_id = model.get("mask_token_id", None)
    if mask_id is None and found.get("mask_token_id") is None:
        raise ValueError(
            "model.mask_token_id: not set, and the checkpoint's config / tokenizer names no mask token (set it in "
            "the model yaml; a hub model's config is not read before loading)"
        )
    block = model.get("block_length") or found.get("block_length")
    if not block:
        raise ValueError("model.block_length: not set, and the checkpoint's config has none")
    sb = getattr(sampler, "block_length", None) if is_dataclass(sampler) else sampler.get("block_length")
    if sb and isinstance(block, int) and block % sb:
        raise ValueError(f"sampler.block_length: {sb} must divide the model's block length {block}")
    if _shadow_queries(sampler):  # WINO's verify queries: what the model yaml says already (position ids: at build)
        missing = shadow_gaps(context, attention, str(model.get("mask_form", "additive")),
                              bool(model.get("shifted_logits")), layout.sub_block)  # fmt: skip
        if missing:
            raise ValueError(
                f"sampler.verify: shadow: the shadow block needs {', '.join(missing)}; {model.get('name')} has "
                "not (verify: self runs anywhere)"
            )


def _shadow_queries(sampler) -> bool:
    """Does the sampler's rule (an instance, or a config with its `_target_`) ask for the shadow block
    (`samplers.masked_rule`: its class's `shadow_queries`)?"""
    if isinstance(sampler, DictConfig):
        sampler = instantiate(sampler) if sampler.get("_target_") else None
    return bool(getattr(sampler, "shadow_queries", False))


def _checkpoint_fields(model: DictConfig) -> dict:
    """`mask_token_id` / `block_length` from a local checkpoint's config.json and tokenizer files (none for a hub
    id)."""
    p = Path(resolve_model_ref(str(model.path), "model.path"))
    if not p.is_dir():
        return {}
    cfg = json.loads((p / "config.json").read_text())
    out = {"mask_token_id": cfg.get("mask_token_id"), "block_length": cfg.get("block_length") or cfg.get("block_size")}
    tok = p / "tokenizer_config.json"
    if out["mask_token_id"] is None and tok.is_file() and json.loads(tok.read_text()).get("mask_token"):
        out["mask_token_id"] = "tokenizer"
    return out
