"""Hydra entry point: `python -m harness.run model=X sampler=Y eval=Z key=value` (add `-m` to sweep).

Everything that can be wrong with a config is checked before the model loads: sampler knobs
(dataclass validation), the eval's inputs, the model path. The run dir (named from the config
values) then holds config.yaml, samples.jsonl and metrics.json. Composing the config and those checks import
no torch, transformers, pandas or scipy (`harness.tracking.callbacks` and `model_kind` keep theirs lazy), so a
bad config fails in about a second (tests/test_fast_fail.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from contract.decoding import DecoderKind, SelfDrivingEval
from evals.decode_order import ar_like_note
from harness.launch.cluster import SlurmJob, route_preemption_signals
from harness.launch.ray_launch import RayTask
from harness.launch.shards import check_shards, run_sharded
from harness.runner.batch_check import BatchCheckConfig, run_batch_check
from harness.runner.configs import (
    check_decoder,
    check_eval_hub_access,
    check_family,
    check_model_path,
    check_thinking_switch,
    model_kind,
    register_configs,
)
from harness.runner.device_check import check_device
from harness.runner.evaluate import checked_items, run_items
from harness.runner.identity import decoder_identity, loaded_commit, model_identity
from harness.runner.store import ResultStore, scan_run

log = logging.getLogger(__name__)
register_configs()


# lm-eval builds its prompts only while it runs; the memory check assumes prompts up to this long for them.
LM_EVAL_PROMPT_TOKENS = 2048


def _model_config(model: DictConfig, path: str, revision: str | None, remote: bool):
    """The checkpoint's config for the memory estimate; remote code is prepared as the adapter's loading prepares it
    (the estimate builds the model on `meta`, importing its code): stand-ins installed, classes fitted."""
    from models import memory, remote_load

    remote_load.install_fallbacks(model.get("torch_fallbacks"))
    if remote:
        auto_name = "AutoModel" if model.get("auto_class") == "model" else "AutoModelForCausalLM"
        remote_load.fit_remote_classes(path, auto_name, revision)
    return memory.load_config(path, revision=revision, trust_remote_code=remote)


def plan_batch_size(cfg: DictConfig, ev, sampler, items: list | None) -> int:
    """The batch size to decode with, checked against a memory estimate before any weights load.

    For every family the peak (weights, KV cache for the longest prompt + max_new_tokens, the logits workspace,
    activations; `models.memory`) is compared with the device's free memory: a batch that cannot fit fails here
    naming `batch_size`; `batch_size=auto` picks the largest that fits (at most the number of items). AR + draft /
    MTP decoders are estimated as their target verifying k + 1 positions per row (the drafter's own weights and
    cache are not in the estimate: a drafter is small next to it); masked models by `estimate_masked_peak`."""
    bs = cfg.batch_size
    if bs != "auto" and (isinstance(bs, bool) or not isinstance(bs, int) or bs < 1):
        raise ValueError(f"batch_size: must be an integer >= 1 or 'auto', got {bs!r}")
    if cfg.model.get("device_map"):
        if bs == "auto":
            raise ValueError("batch_size=auto needs a model on one device (the memory estimate); drop model.device_map")
        return bs
    from transformers import AutoTokenizer

    from contract.paths import resolve_model_ref
    from contract.text import encode_prompt
    from models import masked_memory, memory

    kind, remote = model_kind(cfg.model), bool(cfg.model.get("trust_remote_code"))
    path, revision = resolve_model_ref(str(cfg.model.path), "model.path"), cfg.model.get("revision")
    config = _model_config(cfg.model, path, revision, remote)
    if items is not None:
        tok = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=remote)
        prompt = max(len(encode_prompt(tok, it.prompt, cfg.model.get("enable_thinking"))) for it in items)
    else:
        prompt = LM_EVAL_PROMPT_TOKENS
    kwargs = {"prompt_tokens": prompt, "attn_implementation": cfg.model.get("attn_implementation") or "sdpa"}
    # an AR step is one token per row (a verify step k + 1): the same estimate with that canvas (logits B x C x V)
    if kind == DecoderKind.MASKED:  # a block of L per step; its blocks are aligned at position 0
        canvas = sampler.block_length or cfg.model.get("block_length")
        canvas = canvas or getattr(config, "block_length", None) or getattr(config, "block_size", None)
        canvas = ev.max_new_tokens if canvas == "answer" else canvas  # Dream: the whole answer is one block
        auto_class = str(cfg.model.get("auto_class", "causal_lm"))
        kwargs.update(peak=masked_memory.estimate_masked_peak, context=str(cfg.model.get("context", "recompute")))
        kwargs.update(sampled=sampler.temperature > 0, parameters=memory.count_parameters(config, auto_class, remote))
        kwargs.update(trims_logits=masked_memory.trims_lm_head(config, auto_class, remote))
    elif kind == DecoderKind.DIFFUSION:
        canvas = sampler.canvas_length or config.canvas_length
    elif kind in (DecoderKind.AR_MTP, DecoderKind.AR_DRAFT):
        canvas = int(cfg.model.get("num_draft_tokens", 4)) + 1
    else:
        canvas = 1
    if kind == DecoderKind.MASKED:
        context = -(-(prompt + ev.max_new_tokens) // canvas) * canvas
    else:
        context = prompt + -(-ev.max_new_tokens // canvas) * canvas
    limit = getattr(config.get_text_config(), "max_position_embeddings", None)
    if limit and context > limit:
        raise ValueError(
            f"eval.max_new_tokens / sampler.canvas_length: the longest prompt ({prompt} tokens) plus "
            f"{ev.max_new_tokens} new tokens in canvases of {canvas} needs {context} positions, beyond the model's "
            f"{limit} (max_position_embeddings)"
        )
    dtype_bytes = memory.dtype_bytes_of(str(cfg.model.get("dtype", "auto")), config)
    free = memory.free_memory_bytes(str(cfg.model.get("device", "cpu")))
    if kind == DecoderKind.DIFFUSION and cfg.model.get("compile") == "step":
        kwargs.update(whole_step=True, logits_factor=3.0)  # a bucket of rows; draw_whole's temporaries
    max_batch = len(items) if items else 1024
    if bs == "auto":
        bs = memory.largest_batch_that_fits(config, context, canvas, dtype_bytes, free, max_batch=max_batch, **kwargs)
        log.info("batch_size=auto: %d (context %d tokens, %.1f GiB free)", bs, context, free / memory.GIB)
        return bs
    memory.check_batch_fits(config, bs, context, canvas, dtype_bytes, free, **kwargs)
    return bs


def report_values(report: DictConfig | None, model: DictConfig, label: str) -> dict[str, Any] | None:
    """What a `report_*` preset says this run should measure: `report.expected` keyed by model name (wins) or by
    decoder label (`<label>+lora` for a model with a LoRA adapter), e.g. `{figure: ..., where: ..., values:
    {quality: 0.732}}`; None when it says nothing about this run."""
    if not report:
        return None
    by_key = report.get("expected") or {}
    expected = by_key.get(model.name, by_key.get(f"{label}+lora" if model.get("adapter") else label))
    if expected is None:
        return None
    return {
        "figure": report.get("figure"),
        "where": report.get("where"),
        "values": OmegaConf.to_container(expected, resolve=True),
    }


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


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    started = time.time()
    check_top_level(cfg)
    sampler = instantiate(cfg.sampler)
    check_decoder(cfg, sampler)  # decoder=diffusers: diffusers' schedulers, a DiffusionGemma model
    ev = instantiate(cfg.eval)
    check_device(cfg.model)  # model.device=cuda without CUDA: before any download
    check_model_path(cfg.model)  # also: a gated hub model without a token fails here
    check_family(cfg.model, cfg.sampler)  # masked samplers with masked models, a mask id, block lengths
    check_eval_hub_access(ev)
    # no items, or repeated ids: fail here, before any weights load (lm-eval builds its items while it runs)
    items = None if isinstance(ev, SelfDrivingEval) else checked_items(ev)
    check = BatchCheckConfig.from_config(cfg.get("batch_check"), ev)
    check_shards(cfg, ev)
    # the checks above import nothing heavy (tests/test_fast_fail.py); these two read the checkpoint's tokenizer and
    # config through transformers (seconds), so they come last
    check_thinking_switch(cfg.model)
    batch_size = plan_batch_size(cfg, ev, sampler, items)
    logger = instantiate(cfg.logger)
    route_preemption_signals()  # in a Slurm job: SIGUSR1 requeues like USR2 (harness.launch.cluster)
    store = ResultStore(run_dir)  # exclusive: a second process on the same run dir fails here
    try:
        return _run(cfg, store, sampler, ev, items, batch_size, logger, started, check)
    finally:
        store.close()


def _run(
    cfg: DictConfig,
    store: ResultStore,
    sampler,
    ev,
    items,
    batch_size: int,
    logger,
    started: float,
    check: BatchCheckConfig,
) -> dict[str, Any]:
    if not cfg.resume:
        store.reset()
    identity = {**model_identity(cfg.model), **decoder_identity(cfg.get("decoder"))}
    store.check_identity(identity)  # retrained weights at the same path: stop, never mix
    (store.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    start_logger = partial(
        logger.start,
        run_name=cfg.run_name,
        group=str(cfg.sweep_name),
        config=OmegaConf.to_container(cfg, resolve=True),
        run_dir=str(store.run_dir),
    )
    if cfg.shards > 1:  # the shards decode (harness.launch.shards); this process merges their samples
        start_logger()
        metrics, reports = run_sharded(cfg, store, ev, items, batch_size)
        label, info, extra = reports[0]["label"], reports[0]["decoder"], {"shards": reports}
        if commit := reports[0]["model.commit"]:
            store.check_identity({**identity, "model.commit": commit})
    else:
        metrics, label, info = _decode_here(cfg, store, sampler, ev, items, batch_size, identity, start_logger, check)
        extra = {}
    metrics["batch_size"] = batch_size
    metrics["max_new_tokens"] = ev.max_new_tokens  # the output-length cap (experiment=output_lengths sweeps it)
    run_info = {
        "run_name": cfg.run_name,
        "label": label,
        "model": cfg.model.name,
        "eval": ev.name,
        "sampler": sampler.knobs() if label in DecoderKind.drafted_by_diffusion() else {},
        "seed": cfg.seed,
        "decoder": info,
    }
    if job := SlurmJob.from_env():  # hydra/launcher=slurm: which job, array task and node ran it, how often requeued
        run_info["slurm"] = asdict(job)
    if expected := report_values(cfg.get("report"), cfg.model, label):
        run_info["report"] = expected
    # runs are compared (fronts, front_area, aup_d3llm) only on the same items: eval name, item count, item hash
    run_info["eval_id"] = f"{ev.name}-n{metrics['num_samples']}-{metrics.get('items_sha', 'unknown')[:6]}"
    if task := RayTask.current():  # hydra/launcher=ray: which task, node and GPUs ran it, and when (wall clock)
        run_info["ray"] = {**asdict(task), "started_at": started, "finished_at": time.time()}
    metrics["run"] = {**run_info, **extra}
    store.write_metrics(metrics)
    logger.finish(metrics, ev.scored_rows(store))
    log.info(
        "%s: quality=%s tpf=%.3f [%s, %s] step-cap share %.3g nfe=%d tok/s=%.1f%s -> %s",
        cfg.run_name,
        metrics.get("quality"),
        metrics["tpf"],
        *(f"{metrics[k]:.3f}" if metrics.get(k) is not None else "-" for k in ("tpf_lo", "tpf_hi")),
        metrics.get("step_cap_hit_rate", 0.0),
        metrics["nfe"],
        metrics["tokens_per_second"],
        ar_like_note(metrics),  # evals.decode_order: decoding that is effectively left to right
        store.run_dir,
    )
    return metrics


def _decode_here(
    cfg, store, sampler, ev, items, batch_size: int, identity, start_logger, check: BatchCheckConfig
) -> tuple[dict, str, dict]:
    """Load the model in this process and decode what is not stored yet: (metrics, decoder label, its description);
    then the batch check, if asked (`harness.runner.batch_check`)."""
    import torch  # heavy imports only after every check passed

    torch.manual_seed(cfg.seed)  # only the `reference` random stream reads the global RNG
    from harness.engine.decoders import decoder_for
    from models.expert_counter import for_decoder as count_experts

    model = instantiate(cfg.model)
    if commit := loaded_commit(model):  # a hub id: name the weights actually loaded, and refuse a mix
        store.check_identity({**identity, "model.commit": commit})
    decoder = decoder_for(model, sampler)
    info = decoder.describe()
    start_logger()
    # MoE experts touched per forward, by forward kind (router hooks, read once at the end; they would break a
    # compiled graph, so compiled models go without). A resumed run counts the forwards it ran itself.
    experts = None if cfg.model.get("compile") else count_experts(decoder)
    if isinstance(ev, SelfDrivingEval):  # lm-eval builds and scores its own requests
        metrics = ev.run(decoder, store, batch_size=batch_size, seed=cfg.seed)
    else:
        metrics = run_items(ev, decoder, store, batch_size=batch_size, seed=cfg.seed, items=items)
    if experts is not None:
        if experts.forwards():
            metrics["experts_per_forward"] = experts.summary()
        experts.close()
    # after the expert counts: its batch-1 forwards are not the run's
    done = scan_run(store.run_dir).rows  # every samples file (a run resumed after a sharded one has several)
    if block := run_batch_check(check, ev, decoder, store, batch_size, cfg.seed, items, done):
        metrics["batch_check"] = block
    return metrics, decoder.label, info


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    return metrics.get("quality")


if __name__ == "__main__":
    main()
