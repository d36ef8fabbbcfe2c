"""The run card: the environment a run decoded in and what shaped its prompts, kept as `run_card.json` in the run dir.

Diffusion-model numbers move with the machine (one model's GSM8K is 77.5 on an H200 and 72.8 on an A100 with the same
settings), so two runs of one config are told apart by where they ran. The card holds:

- `environment`: device name and count, NVIDIA driver and CUDA versions (CUDA devices only), the torch / transformers /
  diffusers / lm-eval versions, the compile mode, the project's git commit and whether tracked files differed from it
  (`git_dirty`; untracked files do not count), and, once the model has loaded, the dtype of its weights and the
  attention backend its config names (`dtype`, `attention`; what was used, not what was asked: `dtype=auto` records
  the dtype it resolved to);
- `prompts`: hashes of what shaped the prompts: the eval's config, the chat template, the system prompt(s) and the
  few-shot turns (the messages before each item's last user turn; lm-eval: `num_fewshot` and its task folders'
  files), so a card says whether two runs asked the same questions the same way;
- `earlier_environments`: the environments of samples a resume under `resume_across_env=true` kept.

Both blocks are part of the run's identity: a resume into a run dir whose samples were made under another environment
is refused naming each field that differs, unless `resume_across_env=true`; other prompts are always refused (their
samples answer other questions). The sweep summary groups and labels runs by environment where it differs
(`harness.analysis.environments`).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from contract.files import atomic_write
from harness.runner.store import sample_files

RUN_CARD = "run_card.json"
RESUME_KEY = "resume_across_env"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"torch": "torch", "transformers": "transformers", "diffusers": "diffusers", "lm_eval": "lm_eval"}
# filled once the model has loaded (`record_loaded`); None until then, and for sharded runs (their shards load it)
LOADED_FIELDS = ("dtype", "attention")
# the environment's fields in the order labels list them (`harness.analysis.environments`)
ENV_FIELDS = ("device", "device_count", "driver", "cuda", "torch", "transformers", "diffusers", "lm_eval")
ENV_FIELDS += (*LOADED_FIELDS, "compile", "git_commit", "git_dirty")


def short_sha(obj: Any) -> str:
    """A 16-hex-digit SHA-256 of `obj` (text as is, anything else as sorted JSON)."""
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def git_state(root: Path = PROJECT_ROOT) -> tuple[str | None, bool | None]:
    """(commit, whether tracked files differ from it); (None, None) outside a git checkout."""
    try:
        git = ["git", "-C", str(root)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if commit.returncode or status.returncode:
        return None, None
    return commit.stdout.strip(), bool(status.stdout.strip())


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None


def device_fields(model_cfg: Any) -> dict[str, Any]:
    """The device the model decodes on: its name and count, the NVIDIA driver and the CUDA version (CUDA only)."""
    import torch

    device = str(model_cfg.get("device") or "cpu")
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        count = torch.cuda.device_count() if model_cfg.get("device_map") else 1
        name = torch.cuda.get_device_name(index)
        return {"device": name, "device_count": count, "driver": _nvidia_driver(), "cuda": torch.version.cuda}
    return {"device": f"cpu: {_cpu_name()}", "device_count": 1, "driver": None, "cuda": None}


def environment(model_cfg: Any) -> dict[str, Any]:
    """Every environment field knowable before the model loads (`LOADED_FIELDS` are None here)."""
    commit, dirty = git_state()
    return {
        **device_fields(model_cfg),
        **{field: package_version(dist) for field, dist in PACKAGES.items()},
        "compile": str(model_cfg.get("compile") or False).lower(),
        "git_commit": commit,
        "git_dirty": dirty,
        **dict.fromkeys(LOADED_FIELDS),
    }


def _messages(prompt: Any) -> list[dict[str, Any]]:
    return prompt if isinstance(prompt, list) else []


def prompt_hashes(eval_cfg: Any, items: list | None) -> dict[str, str | None]:
    """Hashes of what shapes the prompts besides each item's own text (which `item_sha` covers per sample): the eval's
    config, its system prompt(s) and few-shot turns; lm-eval (no items here): its system instruction, `num_fewshot`
    and the files of its task folders. None where the eval has none. The chat template is added on load."""
    cfg = OmegaConf.to_container(eval_cfg, resolve=True) if isinstance(eval_cfg, DictConfig) else dict(eval_cfg)
    out: dict[str, str | None] = {"eval_config": short_sha(cfg), "chat_template": None}
    if items is None:  # lm-eval builds its prompts while it runs
        folders = cfg.get("include_path") or []
        folders = [folders] if isinstance(folders, str) else folders
        files = sorted(p for d in folders for p in Path(d).rglob("*") if p.suffix in (".yaml", ".yml", ".py"))
        system = cfg.get("system_instruction")
        out["system_prompt"] = short_sha(system) if system else None
        out["fewshot"] = short_sha({"num_fewshot": cfg.get("num_fewshot")})
        out["task_files"] = short_sha({str(p): p.read_text() for p in files}) if files else None
        return out
    systems = sorted({str(m.get("content")) for it in items for m in _messages(it.prompt) if m.get("role") == "system"})
    shots = []
    for it in items:
        turns = [m for m in _messages(it.prompt) if m.get("role") != "system"]
        last_user = max((i for i, m in enumerate(turns) if m.get("role") == "user"), default=0)
        if turns[:last_user]:
            shots.append(turns[:last_user])
    out["system_prompt"] = short_sha(systems) if systems else None
    out["fewshot"] = short_sha(shots) if shots else None
    return out


def read_card(run_dir: str | Path) -> dict[str, Any] | None:
    """A run dir's card, or None (runs stored before cards existed, or a card that cannot be read)."""
    path = Path(run_dir) / RUN_CARD
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields set on both sides whose values differ: {field: (old, new)}."""
    both = [k for k in sorted(new) if old.get(k) is not None and new[k] is not None]
    return {k: (old[k], new[k]) for k in both if old[k] != new[k]}


def _has_samples(run_dir: Path) -> bool:
    return any(p.stat().st_size for p in sample_files(run_dir))


def resume_across_env(cfg: Any) -> bool:
    """`resume_across_env` (absent: false), typed: `resume_across_env=yes` must fail, not mean something."""
    value = cfg.get(RESUME_KEY, False)
    if not isinstance(value, bool):
        raise ValueError(f"{RESUME_KEY}: must be true or false, got {value!r}")
    return value


def _refusal(run_dir: Path, what: str, diff: dict[str, tuple[Any, Any]], fix: str) -> RuntimeError:
    detail = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
    return RuntimeError(
        f"{run_dir} holds samples made under {what} ({detail}). Resuming would mix them in one run's figures: {fix}"
    )


def update_card(cfg: Any, run_dir: str | Path, env: dict[str, Any], prompts: dict[str, Any]) -> dict[str, Any]:
    """Check `env` and `prompts` against the stored card (when the run dir holds samples) and store them: other prompts
    are refused; another environment is refused unless `resume_across_env=true`, which keeps the old environment in
    `earlier_environments`. Fields that are None on either side are not compared (not known yet, or not recorded)."""
    run_dir = Path(run_dir)
    across = resume_across_env(cfg)
    old = read_card(run_dir) if _has_samples(run_dir) else None
    card = {"environment": env, "prompts": prompts, "earlier_environments": [], "recorded_at": time.time()}
    if old:
        if diff := differences(old.get("prompts") or {}, prompts):
            raise _refusal(run_dir, "other prompts", diff, "re-run with resume=false to start this run afresh")
        old_env = {**(old.get("environment") or {})}
        card["earlier_environments"] = list(old.get("earlier_environments") or [])
        card["prompts"] = {**(old.get("prompts") or {}), **{k: v for k, v in prompts.items() if v is not None}}
        if diff := differences(old_env, env):
            if not across:
                fix = f"set {RESUME_KEY}=true to resume anyway (the card keeps both), or resume=false to start afresh"
                raise _refusal(run_dir, "another environment", diff, fix)
            card["earlier_environments"].append(old_env)
        else:  # the same environment: keep what the earlier part knew that this one does not know yet
            card["environment"] = {**old_env, **{k: v for k, v in env.items() if v is not None}}
        card["recorded_at"] = old.get("recorded_at", card["recorded_at"])
    atomic_write(run_dir / RUN_CARD, json.dumps(card, indent=2, sort_keys=True, default=str))
    return card


def check_run_card(cfg: Any, run_dir: str | Path, items: list | None) -> dict[str, Any]:
    """Before the model loads (after `ResultStore.check_identity`): the environment and prompts as far as known."""
    resume_across_env(cfg)
    return update_card(cfg, run_dir, environment(cfg.model), prompt_hashes(cfg.eval, items))


def loaded_fields(model: Any, decoder: Any) -> dict[str, Any]:
    """The dtype of the loaded weights and the attention backend the model's config names (the adapter's `.model`)."""
    module = getattr(model, "model", model)
    params = getattr(module, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    config = getattr(module, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    attention = getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", None)
    return {"dtype": str(first.dtype).removeprefix("torch.") if first is not None else None, "attention": attention}


def record_loaded(cfg: Any, run_dir: str | Path, model: Any, decoder: Any) -> dict[str, Any]:
    """Once the model has loaded and its decoder is built: add the dtype and attention backend (and the chat template's
    hash) to the card, checked against the stored ones like the rest."""
    card = read_card(run_dir) or {}
    env = {**(card.get("environment") or environment(cfg.model)), **loaded_fields(model, decoder)}
    tok = getattr(decoder, "tokenizer", None) or getattr(model, "tokenizer", None)
    template = getattr(tok, "chat_template", None)
    prompts = {**(card.get("prompts") or {}), "chat_template": short_sha(template) if template else None}
    if read_card(run_dir) is not None and _has_samples(Path(run_dir)):
        return update_card(cfg, run_dir, env, prompts)
    card.update(environment=env, prompts=prompts)
    atomic_write(Path(run_dir) / RUN_CARD, json.dumps(card, indent=2, sort_keys=True, default=str))
    return card
