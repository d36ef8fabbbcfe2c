"""Our engine against diffusers' `DiffusionGemmaPipeline` (`decoder=diffusers`) on the shipped 6x6 Sudoku model, with
the checkpoint's sampler on both (entropy bound 0.1, 48 steps, T 0.8 -> 0.4, adaptive stop).

1. Quality and forwards (`side_by_side`): the same held-out puzzles through both; solved rate with its Wilson 95%
   interval, TPF (tokens / forwards over the set) with a paired percentile-bootstrap 95% interval over puzzles (TPF is
   heavy-tailed: a canvas at the step cap moves the mean), forwards, step-cap hits. The slow test
   (tests/test_diffusers_decoder.py) asserts that each side's figure lies in the other's interval.
2. Speed (`speed`): b puzzles decoded as one batch of b (b = 1, 16, 64), the two interleaved round by round in one
   process; median tokens/s of each and the ratio engine / pipeline.

`python -m bench.cpu.diffusers_bench [--quick] [--out-dir DIR]` prints both and writes diffusers_bench.json.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.cpu.common import interleaved, machine_info, median, print_machine, quick_cli, table, write_json
from contract.intervals import ratio_interval

CKPT = Path(__file__).resolve().parents[2] / "models" / "checkpoints" / "sudoku6_diffusion"
EVAL_CONF = Path(__file__).resolve().parents[2] / "conf" / "eval" / "sudoku6.yaml"


def load(num_threads: int = 1):
    """The shipped model, the sudoku6 eval, and the two decoders at the checkpoint's sampler: (eval, decoders)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from harness.engine.decoders import decoder_for
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig
    from samplers.diffusers_config import DiffusersEntropyBoundConfig

    adapter = DiffusionGemmaAdapter(str(CKPT), dtype="float32", num_threads=num_threads)
    ev = instantiate(OmegaConf.load(EVAL_CONF))  # its data path resolves against the repo root
    decoders = {
        "engine": decoder_for(adapter, EntropyBoundConfig()),
        "diffusers": decoder_for(adapter, DiffusersEntropyBoundConfig()),
    }
    return ev, decoders


def tpf_interval(tokens: list[int], forwards: list[int]) -> tuple[float, float]:
    """The one TPF interval (`contract.intervals`): paired percentile bootstrap of sum(tokens) / sum(forwards)."""
    iv = ratio_interval(tokens, forwards)
    return (iv.lo, iv.hi) if iv else (float("nan"), float("nan"))


def figures(ev, items: list, results: list) -> dict[str, Any]:
    """Solved rate (Wilson 95%), TPF (bootstrap 95%), forwards, steps and step-cap hits of one decoder's results."""
    from contract.intervals import wilson_interval

    by_id = {r.sample_id: r for r in results}
    rows = [by_id[it.sample_id] for it in items]
    solved = [ev.score(it, r.text)["correct"] for it, r in zip(items, rows, strict=True)]
    tokens, nfe = [r.num_tokens for r in rows], [r.nfe for r in rows]
    rate = sum(solved) / len(solved)
    return {
        "n": len(rows),
        "solved_rate": rate,
        "solved_interval": wilson_interval(rate, len(rows)),
        "tpf": sum(tokens) / sum(nfe),
        "tpf_interval": tpf_interval(tokens, nfe),
        "forwards": sum(nfe),
        "row_forwards": sum(r.row_forwards for r in rows),
        "tokens": sum(tokens),
        "mean_steps_per_canvas": float(np.mean([s for r in rows for s in r.steps_per_canvas])),
        "step_cap_hits": sum(r.step_cap_hits for r in rows),
    }


def side_by_side(ev, decoders: dict, n: int, batch_size: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The first `n` puzzles through each decoder at `batch_size`: `figures` per decoder."""
    from harness.runner.evaluate import requests_for

    items = ev.items()[:n]
    out = {}
    for name, dec in decoders.items():
        results = list(dec.stream(requests_for(ev, dec, items, seed), batch_size=batch_size))
        out[name] = figures(ev, items, results)
    return out


def _decode(decoder, reqs: list, batch_size: int, counts: dict, name: str) -> None:
    res = list(decoder.stream(reqs, batch_size=batch_size))
    counts[name] = (sum(r.num_tokens for r in res), sum(r.nfe for r in res), sum(r.row_forwards for r in res))


def speed(ev, decoders: dict, batches: list[int], repeats: int) -> list[dict[str, Any]]:
    """Per batch size b: b puzzles as one batch, the decoders interleaved; median tokens/s, engine / pipeline, and the
    share of computed batch rows that were still denoising (the pipeline computes every row until the batch stops)."""
    from harness.runner.evaluate import requests_for

    rows = []
    for b in batches:
        items = ev.items()[:b]
        reqs = {name: requests_for(ev, d, items, 0) for name, d in decoders.items()}
        counts: dict[str, tuple[int, int, int]] = {}
        calls = {name: partial(_decode, decoders[name], reqs[name], b, counts, name) for name in decoders}
        times = interleaved(calls, repeats=repeats, warmup=1)
        row: dict[str, Any] = {"batch": b}
        for name in decoders:
            tokens, nfe, row_forwards = counts[name]
            row[f"{name}_s"] = median(times[name])
            row[f"{name}_tok_s"] = tokens / median(times[name])
            row[f"{name}_row_utilization"] = nfe / row_forwards  # batch rows computed that were still denoising
        row["engine_over_diffusers"] = row["engine_tok_s"] / row["diffusers_tok_s"]
        rows.append(row)
    return rows


def run(quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    ev, decoders = load()
    n = 16 if quick else 300
    quality = side_by_side(ev, decoders, n=n, batch_size=16)
    qrows = [{"decoder": k, **v} for k, v in quality.items()]
    print(f"\n{n} puzzles, batch 16, the checkpoint's sampler on both")
    cols = ["decoder", "solved_rate", "solved_interval", "tpf", "tpf_interval", "forwards", "step_cap_hits"]
    print(table(qrows, cols))
    batches = [1, 4] if quick else [1, 16, 64]
    srows = speed(ev, decoders, batches, repeats=1 if quick else 5)
    print("\nspeed (median of interleaved rounds, one process)")
    cols = ["batch", "engine_tok_s", "diffusers_tok_s", "engine_over_diffusers", "engine_s", "diffusers_s"]
    cols += ["engine_row_utilization", "diffusers_row_utilization"]
    print(table(srows, cols))
    from importlib.metadata import version

    payload = {"machine": {**info, "diffusers": version("diffusers")}, "quality": quality, "speed": srows}
    path = write_json("diffusers_bench", payload, *([out_dir] if out_dir else []))
    print(f"\n-> {path}")
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, run)
