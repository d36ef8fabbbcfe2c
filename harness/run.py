"""Hydra entry point: `python -m harness.run model=X sampler=Y eval=Z key=value` (add `-m` to sweep).

The data path reads one way: config -> checks (`harness.runner.preflight`, before any weights load) -> model +
sampler + eval -> engine (`harness.engine.decoders`, from the family registry `contract.families`) -> per-sample
records (`harness.runner.store`) -> metrics -> loggers; figures come from the sweep summary. The run dir (named from
the config values) holds config.yaml, samples.jsonl and metrics.json. Composing the config and the config checks
import no torch, transformers, pandas or scipy, so a bad config fails in about a second (tests/test_fast_fail.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from contract.decoding import SelfDrivingEval
from harness.launch.cluster import SlurmJob, route_preemption_signals
from harness.launch.ray_launch import RayTask
from harness.launch.shards import check_shards, run_sharded
from harness.runner.batch_check import run_batch_check
from harness.runner.configs import register_configs
from harness.runner.evaluate import run_items
from harness.runner.identity import loaded_commit
from harness.runner.plan import build_decoder, load_model
from harness.runner.preflight import Preflight, preflight
from harness.runner.run_card import check_run_card, record_loaded
from harness.runner.run_record import log_summary, run_info, saved_config
from harness.runner.store import ResultStore, scan_run

register_configs()


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    started = time.time()
    plan = preflight(cfg, check_launch=check_shards)
    logger = instantiate(cfg.logger)
    route_preemption_signals()  # in a Slurm job: SIGUSR1 requeues like USR2 (harness.launch.cluster)
    store = ResultStore(run_dir)  # exclusive: a second process on the same run dir fails here
    try:
        return _run(cfg, store, plan, logger, started)
    finally:
        store.close()


def _run(cfg: DictConfig, store: ResultStore, plan: Preflight, logger, started: float) -> dict[str, Any]:
    if not cfg.resume:
        store.reset()
    identity = plan.identity
    store.check_identity(identity)  # retrained weights at the same path: stop, never mix
    check_run_card(cfg, store.run_dir, plan.items)  # another environment, other prompts: stop (run_card.json)
    config = saved_config(cfg)
    (store.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(config))
    start_logger = partial(
        logger.start, run_name=plan.run_name, group=str(cfg.sweep_name), config=config, run_dir=str(store.run_dir)
    )
    if cfg.shards > 1:  # the shards decode (harness.launch.shards); this process merges their samples
        start_logger()
        metrics, reports = run_sharded(cfg, store, plan.ev, plan.items, plan.batch_size)
        label, info, extra = reports[0]["label"], reports[0]["decoder"], {"shards": reports}
        if commit := reports[0]["model.commit"]:
            store.check_identity({**identity, "model.commit": commit})
    else:
        metrics, label, info = _decode_here(cfg, store, plan, identity, start_logger)
        extra = {}
    metrics["batch_size"] = plan.batch_size
    metrics["max_new_tokens"] = plan.ev.max_new_tokens  # the output-length cap (experiment=output_lengths sweeps it)
    metrics["run"] = {**run_info(cfg, plan.ev, plan.sampler, label, info, metrics), **_where_it_ran(started), **extra}
    store.write_metrics(metrics)
    logger.finish(metrics, plan.ev.scored_rows(store))
    log_summary(cfg.run_name, metrics, store.run_dir)
    return metrics


def _where_it_ran(started: float) -> dict[str, Any]:
    """hydra/launcher=slurm: which job, array task and node ran it, how often requeued; hydra/launcher=ray: which
    task, node and GPUs ran it, and when (wall clock)."""
    out: dict[str, Any] = {}
    if job := SlurmJob.from_env():
        out["slurm"] = asdict(job)
    if task := RayTask.current():
        out["ray"] = {**asdict(task), "started_at": started, "finished_at": time.time()}
    return out


def _decode_here(cfg, store, plan: Preflight, identity, start_logger) -> tuple[dict, str, dict]:
    """Load the model in this process and decode what is not stored yet: (metrics, decoder label, its description);
    then the batch check, if asked (`harness.runner.batch_check`)."""
    import torch  # heavy imports only after every check passed

    torch.manual_seed(cfg.seed)  # only the `reference` random stream reads the global RNG
    from models.instruments.expert_counter import for_decoder as count_experts

    model = load_model(plan.decoder)
    if commit := loaded_commit(model):  # a hub id: name the weights actually loaded, and refuse a mix
        store.check_identity({**identity, "model.commit": commit})
    decoder = build_decoder(plan.decoder, model)
    record_loaded(cfg, store.run_dir, model, decoder)  # the run card: dtype and attention as loaded, chat template
    info = decoder.describe()
    start_logger()
    # MoE experts touched per forward, by forward kind (router hooks, read once at the end; they would break a
    # compiled graph, so compiled models go without). A resumed run counts the forwards it ran itself.
    experts = None if cfg.model.get("compile") else count_experts(decoder)
    ev, bs = plan.ev, plan.batch_size
    if isinstance(ev, SelfDrivingEval):  # lm-eval builds and scores its own requests
        metrics = ev.run(decoder, store, batch_size=bs, seed=cfg.seed)
    else:
        metrics = run_items(ev, decoder, store, batch_size=bs, seed=cfg.seed, items=plan.items)
    if experts is not None:
        if experts.forwards():
            metrics["experts_per_forward"] = experts.summary()
        experts.close()
    # after the expert counts: its batch-1 forwards are not the run's
    done = scan_run(store.run_dir).rows  # every samples file (a run resumed after a sharded one has several)
    if block := run_batch_check(plan.check, ev, decoder, store, bs, cfg.seed, plan.items, done):
        metrics["batch_check"] = block
    return metrics, decoder.label, info


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    return metrics.get("quality")


if __name__ == "__main__":
    main()
