"""Everything that can be wrong with a run, checked before any weights load, in the order of their cost.

The config checks import no torch, transformers, pandas or scipy (tests/test_fast_fail.py), so a bad config fails
in about a second; the last two (the thinking switch, the batch plan) read the checkpoint's tokenizer and config
through transformers (seconds), so they come last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from contract.decoding import SelfDrivingEval
from evals.base import Eval
from harness.runner.batch_check import BatchCheckConfig
from harness.runner.batch_plan import plan_batch_size
from harness.runner.configs import (
    check_decoder,
    check_decoder_engine,
    check_eval_hub_access,
    check_model_path,
    check_thinking_switch,
)
from harness.runner.device_check import check_device
from harness.runner.evaluate import checked_items
from harness.runner.identity import decoder_identity, model_identity
from harness.runner.plan import DecoderPlan, decoder_plan


@dataclass(frozen=True)
class Preflight:
    """The resolved run plan: what a checked config decodes as (`decoder`: family, model class and kind, sampler,
    resolved once; `harness.runner.plan.build_decoder(plan.decoder)` builds it), the run's name and identity (the
    weights' fingerprints a resume must match), and its parts, handed down to the decode."""

    decoder: DecoderPlan
    run_name: str
    identity: dict[str, Any]  # harness.runner.identity: fingerprints of the weights (and of a decoder not ours)
    ev: Any  # the eval
    items: list | None  # None: a self-driving eval (lm-eval) that builds its items while it runs
    batch_size: int
    check: BatchCheckConfig

    @property
    def sampler(self) -> Any:
        return self.decoder.sampler

    @property
    def family(self):
        return self.decoder.family


def check_top_level(cfg: DictConfig) -> None:
    """Type the top-level knobs: `resume=no` or `seed=1.5` must fail, not silently mean something else."""
    if not isinstance(cfg.resume, bool):
        raise ValueError(f"resume: must be true or false, got {cfg.resume!r}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {cfg.seed!r}")
    if report := cfg.get("report"):
        for key, expected in (report.get("expected") or {}).items():
            if not isinstance(expected, DictConfig) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in expected.values()
            ):
                raise ValueError(f"report.expected.{key}: must map metric names to numbers, got {expected!r}")


def preflight(cfg: DictConfig, check_launch=None) -> Preflight:
    """The checks in order; `check_launch(cfg, ev)` (the entry point's launcher checks: shards) runs with the
    cheap ones, before the two that read the checkpoint."""
    check_top_level(cfg)
    sampler = instantiate(cfg.sampler)
    check_decoder(cfg, sampler)  # decoder=diffusers: diffusers' schedulers
    ev = instantiate(cfg.eval)
    check_device(cfg.model)  # model.device=cuda without CUDA: before any download
    check_model_path(cfg.model)  # also: a gated hub model without a token fails here
    plan = decoder_plan(cfg.model, sampler)  # the family, once: its samplers, its own checks (masked: mask id)
    check_decoder_engine(cfg, plan.family)  # decoder=diffusers: a family that has that engine
    check_eval_hub_access(ev)
    if isinstance(ev, Eval):
        ev.check_runtime()  # a code eval's sandbox: SandboxUnavailable here, not after the weights loaded
    # no items, or repeated ids: fail here, before any weights load (lm-eval builds its items while it runs)
    items = None if isinstance(ev, SelfDrivingEval) else checked_items(ev)
    check = BatchCheckConfig.from_config(cfg.get("batch_check"), ev)
    if check_launch is not None:
        check_launch(cfg, ev)
    check_thinking_switch(cfg.model)
    batch_size = plan_batch_size(cfg, ev.max_new_tokens, sampler, items, plan.family)
    identity = {**model_identity(cfg.model), **decoder_identity(cfg.get("decoder"))}
    return Preflight(plan, str(cfg.run_name), identity, ev, items, batch_size, check)
