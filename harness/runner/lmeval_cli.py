"""lm-eval's own command line on our engine: `python -m harness.lmeval --model dllm --model_args model=<model>,...`.

lm-eval 0.4.13 has no plugin entry point for model types (its registry fills only from `lm_eval.models` and from
`@register_model` calls already made), so this module registers `dllm` and then hands the arguments to lm-eval's
CLI unchanged: tasks, shots, limits, `--output_path` (its results JSON) and `--log_samples` (its per-sample logs) are
lm-eval's. `--model_args` keys:
- `model` (a conf/model name), `sampler` (a conf/sampler name; default: the model's family's), `seed`, `chat`
  (render each context as one user message through the chat template; default false, as lm-eval without
  `--apply_chat_template`), `max_gen_toks`;
- `mc_num`, `mc_batch`, `cfg_scale`, `cfg_uncond`, `greedy_check` (`eval.likelihood`,
  contract.scoring.LikelihoodConfig);
- `run_dir`: a folder for our per-request rows (resumable); default: rows kept in memory only;
- any other key is a `model.<key>=<value>` override of the model's config (e.g. `path=...`, `device=cuda`).
The decoder is built as `python -m harness.run model=<model> sampler=<sampler>` builds it
(`harness.runner.plan.compose_plan` + `build_decoder`, as `harness.api.decoder_from_config`).
"""

from __future__ import annotations

import sys
from typing import Any

from lm_eval.api.registry import register_model

from contract.scoring import LikelihoodConfig
from evals.lmeval.model import DecoderLM
from harness.runner.plan import build_decoder, compose_plan

_OWN = {"model", "sampler", "seed", "chat", "max_gen_toks", "run_dir"}


class MemoryStore:
    """A run's rows in memory (no resume): `contract.decoding.Store` for one CLI call without `run_dir`."""

    run_dir = None

    def __init__(self):
        self.rows: dict[str, dict[str, Any]] = {}

    def load(self) -> dict[str, dict[str, Any]]:
        return dict(self.rows)

    def append(self, row: dict[str, Any]) -> None:
        self.rows.setdefault(row["sample_id"], row)


def _bool(value) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


_KNOB_TYPES = {"mc_num": int, "mc_batch": int, "cfg_scale": float, "cfg_uncond": str, "greedy_check": _bool}


@register_model("dllm")
class HarnessLM(DecoderLM):
    """`DecoderLM` built from `--model_args` (see the module docstring); lm-eval passes `batch_size` and `device`."""

    def __init__(self, model: str, batch_size: int | str = 1, max_batch_size: int | None = None, device=None, **kw):
        knobs = {k: _KNOB_TYPES[k](kw.pop(k)) for k in list(kw) if k in _KNOB_TYPES}
        own = {k: kw.pop(k) for k in list(kw) if k in _OWN}
        overrides = [f"model={model}", *([f"sampler={own['sampler']}"] if own.get("sampler") else [])]
        overrides += [f"model.{k}={v}" for k, v in kw.items()]
        if device and str(device) != "cuda":  # lm-eval's default device is cuda; a model's own yaml says where it runs
            overrides.append(f"model.device={device}")
        decoder = build_decoder(compose_plan(overrides))
        store = MemoryStore()
        if own.get("run_dir"):
            from harness.runner.store import ResultStore

            store = ResultStore(own["run_dir"])
        bs = int(batch_size) if str(batch_size).isdigit() else 1
        super().__init__(
            decoder,
            store,
            seed=int(own.get("seed", 0)),
            batch_size=bs,
            chat=_bool(own.get("chat", False)),
            max_gen_toks=int(own.get("max_gen_toks", 256)),
            likelihood=LikelihoodConfig(**{"batch_size": bs, **knobs}),
        )


def check_cli_datasets(argv: list[str]) -> None:
    """The hub data sets of `--tasks` (with `--include_path`) readable from here, checked before lm-eval builds the
    model (it reads the data sets only after): offline and not cached, one line naming the set and how to point the
    task at a local copy (`harness.runner.configs.check_hub_datasets`, as `harness.run eval=lm_eval` checks them)."""
    import argparse

    from evals.lmeval.eval import local_copy_hint
    from evals.lmeval.task_types import task_hub_datasets
    from harness.runner.configs import check_hub_datasets

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--tasks", "-t", nargs="+", default=[])
    ap.add_argument("--include_path", default=None)
    args, _ = ap.parse_known_args(argv)
    tasks = [t for arg in args.tasks for t in arg.split(",") if t]
    repos = task_hub_datasets(tasks, [args.include_path] if args.include_path else [])
    check_hub_datasets(repos, "--tasks", lambda repo: local_copy_hint(repo, repos[repo], "--include_path"))


def main(argv: list[str] | None = None) -> None:
    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    try:
        check_cli_datasets(sys.argv[1:])
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    cli_evaluate()


if __name__ == "__main__":
    main()
