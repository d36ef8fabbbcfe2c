"""End to end for the LLaDA-based strategies: `python -m harness.run` (the CLI, the engine, our rule) against the
authors' generate function, token for token, on the same tiny random LLaDA built from dParallel's own modeling file
(`harness.hub_check.check_family`: build, load through the shipped model yaml with only path / CPU / float32 set,
decode a few prompts with `eval=prompts`, run their routine on the in-memory model, greedy, batch 1).

Model yaml: conf/model/dparallel_llada_8b.yaml (LLaDA's layout: the whole answer on the canvas, blocks from the
prompt's end), for all three; EB-Sampler's port decodes the whole answer as one block (`sampler.block_length` = the
answer). PC-Sampler reads the background file `replay.baseline_file` writes (both sides).
"""

from __future__ import annotations

import functools
import shutil
import sys
from pathlib import Path

import torch

from harness.hub_check import check_family
from harness.hub_families import Case, HubFamily, load_routine_module
from harness.strategies_check.llada import authors_generate
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


def _dparallel(code_dir: Path):
    if str(code_dir / "dparallel") not in sys.path:
        sys.path.insert(0, str(code_dir / "dparallel"))  # its generate.py imports model.modeling_llada
    return load_routine_module(code_dir / "dparallel", "dparallel")


def families(code_dir: Path) -> list[HubFamily]:
    """The end-to-end cases, one family per strategy; the authors' modules load when a routine first runs, so the
    cases (the CLI overrides) exist without their code."""
    dpar = functools.cache(lambda: _dparallel(code_dir))
    pcs = functools.cache(lambda: load_routine_module(code_dir / "pc_sampler" / "src", "pc_sampler"))
    slowfast = functools.cache(lambda: authors_generate("slowfast", code_dir))
    klass = functools.cache(lambda: authors_generate("klass", code_dir))
    base = str(baseline_file(LLADA_VOCAB))

    def own_dparallel(model, ids, case, mask_id, folder):
        _use_cache(model)
        thr, gen = case.knobs["entropy_threshold"], dpar().generate
        x, _ = gen(model, ids, steps=NEW, gen_length=NEW, block_length=BLOCK, mask_id=mask_id, threshold=thr)
        return x[0, ids.shape[1] :].tolist()

    def own_eb(model, ids, case, mask_id, folder):
        _use_cache(model)
        x = pcs().generate_with_eb_sampler(model, ids, gamma=case.knobs["gamma"], gen_length=NEW, mask_id=mask_id)
        return x[0, ids.shape[1] :].tolist()

    def own_pc(model, ids, case, mask_id, folder):
        _use_cache(model)
        pcs().BASE_LINE = None
        k = case.knobs
        x = pcs().generate_with_pc_sampler(
            model, ids, NEW, NEW, BLOCK, k["lambd"], k["alpha"], base, 0.0, mask_id=mask_id
        )  # steps = the answer's length: one token per step, as its eval
        return x[0, ids.shape[1] :].tolist()

    def own_slowfast(model, ids, case, mask_id, folder):
        _use_cache(model)
        k = case.knobs  # the sampler yaml's defaults, which are theirs
        x, _, _ = slowfast()(
            ids, None, model, gen_length=NEW, block_length=k["block_length"], temperature=0.0, mask_id=mask_id,
            k_exploration_steps=6, cycle_len_confidence_threshold=0.3, cycle_length_stability_window=2,
            cycle_length_stability_std_dev_threshold=1.0, high_confidence_threshold=0.9, max_sub_cycles_per_block=256,
        )  # fmt: skip
        return x[0].tolist()  # it returns the answer alone

    def own_klass(model, ids, case, mask_id, folder):
        _use_cache(model)  # steps = the answer's length: one per position, as its scripts (the yaml: cap_at_block)
        x, _ = klass()(
            model, None, ids, NEW, NEW, case.knobs["block_length"], temperature=0.0, mask_id=mask_id,
            conf_threshold=0.9, kl_threshold=0.01, kl_history_length=2, alg="klass", unmask_strategy="all",
        )  # fmt: skip
        return x[0, ids.shape[1] :].tolist()

    def fam(name, knobs, own, routine, yaml="dparallel_llada_8b", repo="Zigeng/dParallel-LLaDA-8B-instruct"):
        return HubFamily(
            name, yaml, repo, "AutoModel", LLADA_MASK, [126081],
            LLADA_SHRINK, [Case(NEW, name, knobs, block_length=knobs["block_length"])], _each_prompt(own), routine,
        )  # fmt: skip

    llada = {"yaml": "llada_8b_instruct", "repo": "GSAI-ML/LLaDA-8B-Instruct"}

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
        fam("slowfast", {"block_length": BLOCK}, own_slowfast, "generate_slow_fast_sampling", **llada),
        fam("klass", {"block_length": BLOCK}, own_klass, "stable_confident_decode(alg=klass)", **llada),
    ]


def _each_prompt(own):
    """`HubFamily.own` from a routine of one prompt (theirs take batch 1): each prompt's new tokens."""

    def run(model, prompts: list[list[int]], case, mask_id, folder, args) -> list[list[int]]:
        return [own(model, torch.tensor([p]), case, mask_id, folder) for p in prompts]

    return run


def run(code_dir: Path, *, name: str) -> list[Tally]:
    fam = next(f for f in families(code_dir) if f.name == name)
    code_folder(code_dir, name)
    torch.manual_seed(0)
    row = check_family(fam, WORK / "e2e_code", None, WORK / "e2e", 1)
    same = row.identical or 0
    n = len(row.details.get("mismatches", [])) + same  # prompts compared
    return [Tally("tiny LLaDA, harness.run eval=prompts (prompts)", n, n, same, same, row.note)]
