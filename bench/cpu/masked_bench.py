"""Our masked decoder against diffusers' LLaDA2Pipeline on the same tiny block-causal model, greedy.

512-token prompts, 4 blocks of 32 new tokens, the same 64 prompts at batch 1 (one row at a time) and at batch 16
(ours: rows refilled as they finish; the pipeline: four batches of 16): the two must write identical tokens
(checked before timing), then both, at both batches, are timed interleaved round by round in one process and
compared by medians; our own batch scaling (tokens/s at 16 over 1, the same work at both) is paired per round
too. The same prompts at both batches matter: a row takes 4 to 14 forwards by its prompt, so a batch-1 run of
another prompt would measure that prompt as much as the batch; more prompts than rows make the batch-16 run
refill rows mid-run, as an eval does. The pipeline recomputes the whole prefix every step; ours runs the prompt
once and then one block per step over the exact K/V cache, and skips the pipeline's no-op forward after a block's
last mask (row forwards are reported).

    python -m bench.cpu.masked_bench [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import (
    OUT_DIR,
    interleaved,
    machine_info,
    median,
    print_machine,
    quick_cli,
    ratio_stats,
    table,
    write_json,
)
from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from models.masked_diffusion import MaskedDiffusionAdapter, ReferenceModel
from models.tiny import build_masked
from samplers.masked import BlockRefinementConfig

FULL = {"prompt": 512, "block": 32, "blocks": 4, "batches": (1, 16), "prompts": 64, "repeats": 7}
QUICK = {"prompt": 64, "block": 8, "blocks": 4, "batches": (1, 4), "prompts": 8, "repeats": 2}
# each batch decodes the same `prompts` prompts, `batch` rows at a time
SAMPLER = {"threshold": 0.9, "steps_per_block": 8}


def _pipeline(ad: MaskedDiffusionAdapter, block: int):
    from diffusers import BlockRefinementScheduler, LLaDA2Pipeline

    pipe = LLaDA2Pipeline(model=ReferenceModel(ad, block), scheduler=BlockRefinementScheduler(), tokenizer=ad.tokenizer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _contenders(ad, reqs: list[GenerationRequest], batch: int, block: int, gen: int, eos: int) -> dict[str, Any]:
    """Two callables decoding all of `reqs`, returning (token lists cut after EOS, row forwards: a row's forward
    counts once per row computed): ours with at most `batch` rows in flight, each computed while it is busy, and
    the pipeline on consecutive groups of `batch` prompts, every row computed until its group stops (equal prompt
    lengths, so its batches pad nothing)."""
    cfg = BlockRefinementConfig(**SAMPLER)
    pipe = _pipeline(ad, block)
    groups = [reqs[i : i + batch] for i in range(0, len(reqs), batch)]

    def ours():
        out = {r.sample_id: r for r in MaskedDiffusionDecoder(ad, cfg).stream(reqs, batch_size=batch)}
        done = [out[r.sample_id] for r in reqs]
        return [r.token_ids for r in done], sum(r.nfe for r in done)

    def reference():
        n, toks, rows = [0], [], 0

        def count(p, i, t, kw):
            n[0] += 1
            return kw

        for group in groups:
            before = n[0]
            seqs = pipe(
                input_ids=torch.tensor([r.prompt_ids for r in group]), use_chat_template=False, gen_length=gen,
                block_length=block, num_inference_steps=cfg.steps_per_block, temperature=0.0,
                threshold=cfg.threshold, editing_threshold=None, minimal_topk=1, eos_token_id=eos,
                mask_token_id=ad.mask_id, output_type="seq", callback_on_step_end=count,
            ).sequences.tolist()  # fmt: skip
            toks += [s[: s.index(eos) + 1] if eos in s else s for s in seqs]
            rows += (n[0] - before) * len(group)
        return toks, rows

    return {"ours": ours, "llada2_pipeline": reference}


def _requests(ad, cfg: dict, n: int, rng: random.Random) -> list[GenerationRequest]:
    chars, gen = list(range(10, 100)), cfg["block"] * cfg["blocks"]
    return [
        GenerationRequest(str(i), [rng.choice(chars) for _ in range(cfg["prompt"])], seed=i, max_new_tokens=gen)
        for i in range(n)
    ]


def _checked(ad, cfg: dict, reqs: list[GenerationRequest], batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two contenders at one batch, run once: their tokens must be identical. Returns them and that run."""
    fns = _contenders(ad, reqs, batch, cfg["block"], cfg["block"] * cfg["blocks"], next(iter(ad.eos_ids)))
    (ours_tok, ours_fw), (ref_tok, ref_fw) = fns["ours"](), fns["llada2_pipeline"]()
    if ours_tok != ref_tok:
        raise AssertionError(f"batch {batch}: our tokens differ from LLaDA2Pipeline's")
    return fns, {"tokens": sum(map(len, ours_tok)), "ours_row_forwards": ours_fw, "pipeline_row_forwards": ref_fw}


def _row(cfg: dict, batch: int, first: dict[str, Any], times: dict[str, list[float]]) -> dict[str, Any]:
    ours, ref = times[f"ours@{batch}"], times[f"llada2_pipeline@{batch}"]
    return {
        "batch": batch,
        "prompts": cfg["prompts"],
        "prompt_tokens": cfg["prompt"],
        "new_tokens_per_row": cfg["block"] * cfg["blocks"],
        "identical_tokens": True,
        "ours_s": median(ours),
        "pipeline_s": median(ref),
        **ratio_stats(ref, ours),
        "ours_row_forwards": first["ours_row_forwards"],
        "pipeline_row_forwards": first["pipeline_row_forwards"],
        "ours_tokens_per_s": first["tokens"] / median(ours),
        "pipeline_tokens_per_s": first["tokens"] / median(ref),
    }


def _scaling(first: dict[int, dict[str, Any]], times: dict[str, list[float]]) -> dict[str, Any]:
    """Our tokens/s at the largest batch over the smallest, of medians and paired per round (one round runs both):
    `ratio_stats` of their seconds per token."""
    lo, hi = min(first), max(first)
    per_token = {b: [t / first[b]["tokens"] for t in times[f"ours@{b}"]] for b in (lo, hi)}
    return {"batch": hi, "vs_batch": lo, **ratio_stats(per_token[lo], per_token[hi])}


def run(quick: bool = False, out_dir: str | Path | None = None, quiet: bool = False) -> dict[str, Any]:
    """Tokens checked identical per batch first; then every contender at every batch alternates in each round,
    so our batch scaling is paired per round too."""
    cfg = QUICK if quick else FULL
    info = machine_info()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_masked(Path(tmp) / "masked", block_length=cfg["block"])
        ad = MaskedDiffusionAdapter(str(path), dtype="float32", context="cache")
        fns, first = {}, {}
        reqs = _requests(ad, cfg, cfg["prompts"], rng)
        for b in cfg["batches"]:
            pair, first[b] = _checked(ad, cfg, reqs, b)
            fns.update({f"{name}@{b}": fn for name, fn in pair.items()})
        times = interleaved(fns, repeats=cfg["repeats"], warmup=0)
    rows = [_row(cfg, b, first[b], times) for b in cfg["batches"]]
    payload = {
        "machine": info,
        "config": {**cfg, "sampler": SAMPLER},
        "rows": rows,
        "ours_scaling": _scaling(first, times),
    }
    out = write_json("masked_bench", payload, out_dir or OUT_DIR)
    if not quiet:
        print_machine(info)
        cols = ["batch", "ours_s", "pipeline_s", "ratio_of_medians", "median_round_ratio", "ours_row_forwards"]
        print(table(rows, [*cols, "pipeline_row_forwards", "ours_tokens_per_s", "pipeline_tokens_per_s"]))
        sc = payload["ours_scaling"]
        print(
            f"ours, tokens/s at batch {sc['batch']} over batch {sc['vs_batch']}: {sc['ratio_of_medians']:.2f}x "
            f"(medians), {sc['median_round_ratio']:.2f}x (median of per-round ratios)"
        )
        print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, run)
