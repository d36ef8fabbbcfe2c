"""Hydra entry point: `python -m harness.run model=X sampler=Y eval=Z key=value` (add `-m` to sweep).

Everything that can be wrong with a config is checked before the model loads: sampler knobs
(dataclass validation), the eval's inputs, the model path. The run dir (named from the config
values) then holds config.yaml, samples.jsonl and metrics.json.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.configs import check_model_path, register_configs
from harness.store import ResultStore

log = logging.getLogger(__name__)
register_configs()


def build_decoder(model, sampler):
    """Diffusion adapters get the block-diffusion loop; AR adapters decode by themselves."""
    from harness.decode import BlockDiffusionDecoder

    return BlockDiffusionDecoder(model, sampler) if getattr(model, "kind", None) == "diffusion" else model


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    sampler = instantiate(cfg.sampler)
    ev = instantiate(cfg.eval)
    check_model_path(cfg.model)
    logger = instantiate(cfg.logger)
    store = ResultStore(run_dir)
    if not cfg.resume:
        store.reset()
    (store.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    import torch  # heavy imports only after every check above passed

    torch.manual_seed(cfg.seed)  # only the `reference` random stream reads the global RNG
    decoder = build_decoder(instantiate(cfg.model), sampler)
    info = decoder.describe()
    run_info = {"run_name": cfg.run_name, "label": decoder.label, "model": cfg.model.name, "eval": ev.name,
                "sampler": sampler.knobs() if decoder.label == "diffusion" else {}, "seed": cfg.seed, "decoder": info}
    logger.start(run_name=cfg.run_name, group=str(cfg.sweep_name), config=OmegaConf.to_container(cfg, resolve=True),
                 run_dir=str(store.run_dir))
    metrics = ev.run(decoder, store, batch_size=cfg.batch_size, seed=cfg.seed)
    metrics["run"] = run_info
    store.write_metrics(metrics)
    logger.finish(metrics, ev.scored_rows(store))
    log.info("%s: quality=%s tpf=%.3f nfe=%d tok/s=%.1f -> %s", cfg.run_name, metrics.get("quality"),
             metrics["tpf"], metrics["nfe"], metrics["tokens_per_second"], store.run_dir)
    return metrics


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    return metrics.get("quality")


if __name__ == "__main__":
    main()
