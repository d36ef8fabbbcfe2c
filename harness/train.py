"""The training entry point: `python -m harness.train train=<recipe>` (conf/train.yaml + conf/train/*.yaml).

Recipes: from-scratch Sudoku solvers (`sudoku6_diffusion`, `sudoku6_ar`, `sudoku6_ar_draft`, `sudoku9_gpu`;
`evals.sudoku.train`) and LoRA fine-tunes of pretrained models (`sudoku9_lora`, `sudoku9_lora_ar`,
`sudoku4_lora_cpu`; `evals.sudoku.finetune`, docs/lora.md). Any TrainConfig field is overridable
(`steps=100 lora.rank=16`). `python -m evals.sudoku.train` is the same entry. A hub `init_from` downloads
unless HF_HUB_OFFLINE=1 (the Makefile's default), which reads the local cache only.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from evals.sudoku.train import main as train_main
from evals.sudoku.train import register_train_configs


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(dc: DictConfig) -> None:
    train_main(dc)


if __name__ == "__main__":
    register_train_configs()
    main()
