"""`shards=N`: one eval split across N workers, each decoding its share into the same run dir.

The run's own process is the coordinator: it holds the run dir (its lock, config.yaml, identity.json), starts the
shards, and once they are done computes the metrics over the merged samples, so they equal an unsharded run's (every
sample's random numbers depend only on its seed and id, never on its batch). Shard i decodes items i, i+N, ... that no
samples file of the run dir holds yet, into `samples.shard-<i>.jsonl` under a lock of its own (harness.runner.store: one
writer per file, merged on read). So a killed shard, or a killed run, resumes like any run, also with another N.

Where the shards run: under `hydra/launcher=ray`, as Ray tasks with the point's resources (`hydra.launcher.ray.
num_gpus` each; the point's own task holds none); anywhere else, as N processes on this machine
(`python -m harness.launch.shards`), one visible GPU each for a CUDA model (more shards than GPUs are refused) or
CPU-only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from contract.decoding import SelfDrivingEval
from contract.files import atomic_write
from contract.records import changed_items, stale_inputs_error
from evals.base import Eval
from harness.launch.devices import uses_cuda, visible_gpus
from harness.launch.ray_launch import RaySettings, RayTask, in_ray_task
from harness.runner.evaluate import checked_items, item_shas, items_metrics, run_items
from harness.runner.store import ResultStore

SHARD_INFO = ".shard-{}.json"  # what a shard process reports back (decoder, weights, devices)
SHARD_LOG = "shard-{}.log"


def check_shards(cfg: DictConfig, ev) -> int:
    """`shards`, checked before any model loads."""
    n = cfg.get("shards", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"shards: must be an integer >= 1, got {n!r}")
    if n > 1 and isinstance(ev, SelfDrivingEval):
        raise ValueError(f"shards={n}: eval {ev.name!r} (lm-eval) builds its requests as it runs; it cannot be split")
    if n > 1 and cfg.sampler.get("random_stream") == "reference":
        raise ValueError(f"shards={n}: sampler.random_stream=reference draws one stream per run; it cannot be split")
    return n


def decode_shard(config_yaml: str, run_dir: str, shard: int, shards: int, batch_size: int) -> dict[str, Any]:
    """One shard's work (in its own process): items shard, shard + shards, ... not stored yet, into its own file."""
    import torch
    from hydra.utils import instantiate

    from harness.runner.identity import loaded_commit
    from harness.runner.plan import build_decoder, decoder_plan, load_model

    cfg = OmegaConf.create(config_yaml)
    plan, ev = decoder_plan(cfg.model, instantiate(cfg.sampler)), instantiate(cfg.eval)
    items = checked_items(ev)[shard::shards]
    if isinstance(ev, Eval):
        ev.check_runtime()  # this shard's machine grades its items: its sandbox, before the model loads
    store = ResultStore(run_dir, shard=shard)  # a second process for the same shard fails here
    try:
        torch.manual_seed(cfg.seed)
        model = load_model(plan)
        decoder = build_decoder(plan, model)
        run_items(ev, decoder, store, batch_size=batch_size, seed=cfg.seed, items=items)
        task = RayTask.current()
        return {
            "shard": shard,
            "label": decoder.label,
            "decoder": decoder.describe(),
            "model.commit": loaded_commit(model),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "ray": asdict(task) if task else None,
        }
    finally:
        store.close()


def run_sharded(cfg: DictConfig, store: ResultStore, ev, items: list, batch_size: int) -> tuple[dict, list[dict]]:
    """The coordinator: the shards decode, then the metrics over every stored sample. Returns (metrics, what each
    shard reported, by shard)."""
    shas = item_shas(items)
    if changed := changed_items(store.load(), shas):  # edited prompts: stop before any shard starts
        raise stale_inputs_error(changed)
    store.samples_path.touch()  # listed as unfinished by `harness.analysis.aggregate` while the shards run
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    n = int(cfg.shards)
    if in_ray_task() and (launcher := _ray_launcher()) is not None:
        reports = _on_ray(launcher, config_yaml, str(store.run_dir), n, batch_size)
    else:
        reports = _as_processes(cfg, config_yaml, store.run_dir, n, batch_size)
    rows = store.load()
    if missing := [it.sample_id for it in items if it.sample_id not in rows]:
        raise RuntimeError(f"{store.run_dir}: the shards left {len(missing)} samples undone (e.g. {missing[:3]})")
    commits = {r["model.commit"] for r in reports}
    if len(commits) > 1:
        raise RuntimeError(f"shards loaded different weights ({sorted(map(str, commits))}); re-run with resume=false")
    return items_metrics(ev, [rows[it.sample_id] for it in items], shas), reports


def _ray_launcher() -> RaySettings | None:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    launcher = HydraConfig.get().launcher
    if not str(launcher.get("_target_", "")).endswith("RayLauncher"):
        return None
    return RaySettings.parse(OmegaConf.to_container(launcher.ray, resolve=True))


def _on_ray(settings: RaySettings, config_yaml: str, run_dir: str, n: int, batch_size: int) -> list[dict]:
    import ray

    task = ray.remote(**settings.task_options())(decode_shard)
    refs = [task.remote(config_yaml, run_dir, i, n, batch_size) for i in range(n)]
    reports, failed = [], []
    for i, ref in enumerate(refs):
        try:
            reports.append(ray.get(ref))
        except ray.exceptions.RayError as e:  # every shard runs to its end; its samples are kept for a re-run
            failed.append(f"shard {i}: {e}")
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} shards failed (re-run to resume): " + "; ".join(failed))
    return reports


def _die_with_parent() -> None:  # a shard process ends with its coordinator (Linux): no orphan keeps writing
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _as_processes(cfg: DictConfig, config_yaml: str, run_dir: Path, n: int, batch_size: int) -> list[dict]:
    gpus = visible_gpus()
    cuda = uses_cuda(cfg.model.get("device"), cfg.model.get("device_map"))
    if cuda and n > len(gpus):
        raise ValueError(
            f"shards={n}: a model on {cfg.model.get('device')} needs one GPU per shard, and this machine shows "
            f"{len(gpus)}; use shards<={len(gpus)}, or hydra/launcher=ray (shards wait for a free GPU)"
        )
    (run_dir / ".shard-config.yaml").write_text(config_yaml)
    procs = []
    for i in range(n):
        (run_dir / SHARD_INFO.format(i)).unlink(missing_ok=True)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[i] if cuda else ""}
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))  # N shards share the cores
        cmd = [sys.executable, "-m", "harness.launch.shards", str(run_dir), str(i), str(n), str(batch_size)]
        with open(run_dir / SHARD_LOG.format(i), "ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        procs.append(proc)
    codes = [p.wait() for p in procs]
    if failed := [i for i, rc in enumerate(codes) if rc != 0]:
        tail = (run_dir / SHARD_LOG.format(failed[0])).read_text(errors="replace")[-2000:]
        raise RuntimeError(
            f"shards {failed} of {n} failed (exit {[codes[i] for i in failed]}; logs {run_dir}/shard-<i>.log); "
            f"re-run to resume. Shard {failed[0]}'s log ends:\n{tail}"
        )
    return [json.loads((run_dir / SHARD_INFO.format(i)).read_text()) for i in range(n)]


def main(argv: list[str]) -> None:
    """`python -m harness.launch.shards RUN_DIR SHARD SHARDS BATCH_SIZE`: one shard process (started by
    `run_sharded`)."""
    run_dir, shard, shards, batch_size = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    report = decode_shard((run_dir / ".shard-config.yaml").read_text(), str(run_dir), shard, shards, batch_size)
    atomic_write(run_dir / SHARD_INFO.format(shard), json.dumps(report, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
