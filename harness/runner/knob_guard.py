"""A sweep that varies decoding knobs over tasks that never decode is refused before any job starts (issue 47).

Multiple-choice lm-eval tasks (ARC, HellaSwag, MMLU, ...) send only loglikelihood requests: the sampler, the decoder
and the generation settings are never used, so sweeping them runs the same scoring N times and plots a flat line
(a Fast-dLLM user swept `threshold` on MMLU and saw no change). `LikelihoodKnobGuard` (a Hydra callback, conf/hydra/
default.yaml) reads the sweep's overrides (command line and `hydra.sweeper.params`) at `on_multirun_start`, before
the sweeper launches anything, and names the knob and the task. Torch-free: it reads task YAMLs only
(`evals.lmeval.task_types`).
"""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

# override keys (or groups) that only decoding reads
DECODING_KEYS = ("sampler", "decoder", "decode", "eval.gen_kwargs", "eval.max_new_tokens", "eval.stop_strings")
LMEVAL_TARGETS = ("evals.lmeval.LmEvalEval", "evals.lmeval.eval.LmEvalEval")


def _is_decoding_key(key: str) -> bool:
    key = key.split("@")[0]
    return any(key == k or key.startswith(k + ".") for k in DECODING_KEYS)


def swept_keys(cfg: DictConfig) -> list[str]:
    """Keys the sweep varies: sweep overrides on the command line and the sweeper's `params`."""
    task = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False) if "hydra" in cfg else []
    parsed = OverridesParser.create().parse_overrides(list(task or []))
    keys = [o.key_or_group for o in parsed if o.is_sweep_override()]
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None)
    if params:
        for key, value in params.items():
            text = str(value)
            if "," in text or text.startswith(("range(", "choice(", "interval(", "glob(")):
                keys.append(str(key))
    return keys


def check_likelihood_sweep(cfg: DictConfig) -> None:
    """Refuse a sweep over decoding knobs when every lm-eval task of the run sends only loglikelihood requests."""
    knobs = [k for k in swept_keys(cfg) if _is_decoding_key(k)]
    ev = cfg.get("eval") or {}
    if not knobs or ev.get("_target_") not in LMEVAL_TARGETS:
        return
    from evals.lmeval.task_types import likelihood_only

    tasks = list(ev.get("tasks") or [])
    include = list(ev.get("include_path") or [])
    only = likelihood_only(tasks, include, bool(ev.get("include_defaults", True)))
    if tasks and len(only) == len(tasks):
        raise ValueError(
            f"sweep over {', '.join(knobs)}: task(s) {', '.join(only)} are scored by likelihood only "
            "(multiple choice: no request reaches the sampler), so every job would give the same result; sweep "
            "eval.likelihood.* (mc_num, cfg_scale) or use a generate_until task"
        )


class LikelihoodKnobGuard(Callback):
    """Hydra callback: `check_likelihood_sweep` before the sweeper starts any job. Hydra turns an exception raised
    in a callback into a warning and carries on, so the refusal leaves as SystemExit (exit status 1, the message on
    stderr), which it does not catch."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_likelihood_sweep(config)
        except ValueError as e:
            raise SystemExit(f"Error: {e}") from e
