"""End to end for the LLaDA-based strategies: `python -m harness.run` (the CLI, the engine, our rule) against the
authors' generate function, token for token, on the same tiny random LLaDA built from dParallel's own modeling file
(`harness.hub_check.check_family`: build, load through the shipped model yaml with only path / CPU / float32 set,
decode a few prompts with `eval=prompts`, run their routine on the in-memory model, greedy, batch 1).

Model yaml: conf/model/dparallel_llada_8b.yaml (LLaDA's layout: the whole answer on the canvas, blocks from the
prompt's end), for all three; EB-Sampler's port decodes the whole answer as one block (`sampler.block_length` = the
answer). PC-Sampler reads the background file `replay.baseline_file` writes (both sides).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

from harness.hub_check import check_family
from harness.hub_families import Case, HubFamily, load_routine_module
from harness.strategies_check.replay import LLADA_MASK, LLADA_SHRINK, LLADA_VOCAB, WORK, baseline_file
from harness.strategies_check.tally import Tally

NEW, BLOCK = 32, 8


def code_folder(code_dir: Path, name: str) -> Path:
    """LLaDA's config.json beside dParallel's modeling files (what a hub folder of its checkpoint holds)."""
    folder = WORK / "e2e_code" / name
    folder.mkdir(parents=True, exist_ok=True)
    for f in (code_dir / "dparallel" / "model").glob("*_llada.py"):
        shutil.copy(f, folder / f.name)
    shutil.copy(code_dir / "llada" / "config.json", folder / "config.json")
    return folder


def _use_cache(model) -> None:
    if not hasattr(model.config, "use_cache"):  # transformers 5 drops it from the config (as hub_families.own_llada)
        model.config.use_cache = False


def families(code_dir: Path) -> list[HubFamily]:
    if str(code_dir / "dparallel") not in sys.path:
        sys.path.insert(0, str(code_dir / "dparallel"))  # its generate.py imports model.modeling_llada
    dpar = load_routine_module(code_dir / "dparallel", "dparallel")
    pcs = load_routine_module(code_dir / "pc_sampler" / "src", "pc_sampler")
    base = str(baseline_file(LLADA_VOCAB))

    def own_dparallel(model, ids, case, mask_id, folder):
        _use_cache(model)
        thr = case.knobs["entropy_threshold"]
        x, _ = dpar.generate(model, ids, steps=NEW, gen_length=NEW, block_length=BLOCK, mask_id=mask_id, threshold=thr)
        return x[0, ids.shape[1] :].tolist()

    def own_eb(model, ids, case, mask_id, folder):
        _use_cache(model)
        x = pcs.generate_with_eb_sampler(model, ids, gamma=case.knobs["gamma"], gen_length=NEW, mask_id=mask_id)
        return x[0, ids.shape[1] :].tolist()

    def own_pc(model, ids, case, mask_id, folder):
        _use_cache(model)
        pcs.BASE_LINE = None
        k = case.knobs
        x = pcs.generate_with_pc_sampler(
            model, ids, NEW, NEW, BLOCK, k["lambd"], k["alpha"], base, 0.0, mask_id=mask_id
        )  # steps = the answer's length: one token per step, as its eval
        return x[0, ids.shape[1] :].tolist()

    def fam(name, knobs, own, routine):
        return HubFamily(
            name, "dparallel_llada_8b", "Zigeng/dParallel-LLaDA-8B-instruct", "AutoModel", LLADA_MASK, [126081],
            LLADA_SHRINK, Case(NEW, name, knobs, block_length=BLOCK), own, routine,
        )  # fmt: skip

    return [
        fam(
            "dparallel",
            {"entropy_threshold": 0.5, "block_length": BLOCK},
            own_dparallel,
            "dParallel generate(threshold=0.5)",
        ),
        fam("eb_sampler", {"gamma": 0.5, "block_length": NEW}, own_eb, "PC-Sampler generate_with_eb_sampler"),
        fam(
            "pc_sampler",
            {"lambd": 0.25, "alpha": 10.0, "baseline": base, "block_length": BLOCK},
            own_pc,
            "generate_with_pc_sampler",
        ),
    ]


def run(code_dir: Path, *, name: str) -> list[Tally]:
    fam = next(f for f in families(code_dir) if f.name == name)
    code_folder(code_dir, name)
    torch.manual_seed(0)
    row = check_family(fam, WORK / "e2e_code", None, WORK / "e2e", 1)
    same = row.identical or 0
    n = len(row.details.get("mismatches", [])) + same  # prompts compared
    return [Tally("tiny LLaDA, harness.run eval=prompts (prompts)", n, n, same, same, row.note)]
