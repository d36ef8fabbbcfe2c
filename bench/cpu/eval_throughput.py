"""Sudoku 6x6 throughput vs batch size: samples/s of our engine (continuous batching, per-sample streams,
fast draws) and of transformers' `generate()` on the same puzzles, with solved rate, TPF, steps, row
utilization and whether every sample's tokens equal those at the first batch size.

Uses the shipped checkpoint (models/checkpoints/sudoku6_diffusion) when it loads; otherwise a random
model of the same shape, and the output says so (its solved rate means nothing, its speed does).
Prompts are the compact 36-digit puzzles ('0' = blank); the answer is one 36-token canvas.

    python -m bench.cpu.eval_throughput [--batch 1 4 16 64] [--samples 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import machine_info, print_machine, table, write_json

SHIPPED = Path("models/checkpoints/sudoku6_diffusion")
FALLBACK = Path("outputs/bench/models/sudoku6_shape_random")
PUZZLES = Path("evals/sudoku/data/sudoku6_test.jsonl")


def load_model(path: Path = SHIPPED):
    """(adapter, note): the shipped checkpoint, or a random one of the same shape when it is missing/unloadable."""
    from models.diffusion_gemma import DiffusionGemmaAdapter

    if (path / "config.json").exists():
        try:
            return DiffusionGemmaAdapter(
                str(path), dtype="float32", device="cpu", eos_token_ids=[1]
            ), f"checkpoint: {path}"
        except Exception as e:  # e.g. being rewritten by a training run right now
            reason = f"{type(e).__name__}: {e}"[:200]
    else:
        reason = "missing"
    if not (FALLBACK / "config.json").exists():
        from models.tiny import build_diffusion

        build_diffusion(
            FALLBACK, seed=0, canvas_length=36, hidden=128, layers=4, heads=4, intermediate=256, max_position=256
        )
    adapter = DiffusionGemmaAdapter(str(FALLBACK), dtype="float32", device="cpu", eos_token_ids=[1])
    return adapter, f"FALLBACK random model of the same shape ({path} {reason}); solved rates are meaningless"


def puzzles(n: int) -> list[tuple[str, str]]:
    """(puzzle, solution) pairs: the held-out file, or freshly generated unique-solution puzzles."""
    if PUZZLES.exists():
        from evals.sudoku.io import load_puzzles

        ps = load_puzzles(PUZZLES, limit=n)
    else:
        from evals.sudoku.puzzles import generate_puzzles

        ps = generate_puzzles(6, n, (18, 26), seed=0)
    return [(p.puzzle, p.solution) for p in ps]


def _solved(puzzle: str, solution: str, text: str) -> float:
    from evals.sudoku.eval import score_answer
    from evals.sudoku.formats import parse_answer

    return score_answer(puzzle, solution, parse_answer(text, 6))["solved"]


def bench_batch(adapter, items: list[tuple[str, str]], b: int, seed: int = 0) -> dict[str, Any]:
    """Ours streams all puzzles with `b` rows in flight (continuous batching); `generate()` decodes them in
    consecutive batches of `b`. Same puzzles, same model, one process."""
    from contract.records import GenerationRequest, decode_metrics
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig())  # per_sample streams, fast draws
    tok, cells = adapter.tokenizer, 36
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p, _ in items]
    reqs = [GenerationRequest(f"{i}", ids, seed=seed + i, max_new_tokens=cells) for i, ids in enumerate(prompts)]
    t0 = time.perf_counter()
    res = {r.sample_id: r for r in dec.stream(reqs, batch_size=b)}
    t_ours = time.perf_counter() - t0
    t_hf = hf_forwards = solved_hf = 0.0
    for start in range(0, len(items), b):
        chunk = items[start : start + b]
        ids = torch.tensor(prompts[start : start + b])
        torch.manual_seed(seed + start)
        t0 = time.perf_counter()
        out = adapter.model.generate(ids, max_new_tokens=cells, pad_token_id=0, eos_token_id=1)
        t_hf += time.perf_counter() - t0
        hf_forwards += float(
            (torch.full((len(chunk),), float(cells)) / torch.as_tensor(out.tokens_per_forward).float()).sum()
        )
        for (p, s), row in zip(chunk, out.sequences[:, -cells:].tolist(), strict=True):
            solved_hf += _solved(p, s, tok.decode(row, skip_special_tokens=True))
    ordered = [res[r.sample_id] for r in reqs]
    solved_ours = sum(_solved(p, s, r.text) for (p, s), r in zip(items, ordered, strict=True))
    m = decode_metrics([r.to_dict() for r in ordered])
    n = len(items)
    return {
        "batch": b,
        "samples": n,
        "ours_samples_per_s": n / t_ours,
        "generate_samples_per_s": n / t_hf,
        "ratio": t_hf / t_ours,
        "ours_tokens_per_s": m["num_tokens"] / t_ours,
        "ours_tpf": m["tpf"],
        "generate_tpf": n * cells / hf_forwards if hf_forwards else 0.0,
        "ours_mean_steps": m["mean_steps_per_canvas"],
        "row_utilization": m["row_utilization"],
        "ours_solved_rate": solved_ours / n,
        "generate_solved_rate": solved_hf / n,
        "ours_s": t_ours,
        "generate_s": t_hf,
        "tokens": [r.token_ids for r in ordered],
    }


def run(
    batches: list[int],
    samples: int = 64,
    threads: int | None = 1,
    out_dir: str | None = None,
    model_path: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    if threads:
        torch.set_num_threads(threads)
    adapter, note = load_model(Path(model_path) if model_path else SHIPPED)
    info = machine_info()
    items = puzzles(max(samples, max(batches)))
    rows = [bench_batch(adapter, items[: max(b, samples) // b * b], b) for b in batches]  # whole batches only
    base = rows[0]
    for r in rows:  # same puzzles, so per-sample outputs must not depend on the batch size
        n = min(len(r["tokens"]), len(base["tokens"]))
        r["same_tokens_as_first"] = r["tokens"][:n] == base["tokens"][:n]
        r["vs_first_batch"] = r["ours_samples_per_s"] / base["ours_samples_per_s"]
    for r in rows:
        del r["tokens"]
    payload = {"bench": "eval_throughput", "machine": info, "model": note, "rows": rows}
    path = write_json("eval_throughput", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(f"model: {note}")
        print(
            table(
                rows,
                [
                    "batch",
                    "samples",
                    "ours_samples_per_s",
                    "generate_samples_per_s",
                    "ratio",
                    "vs_first_batch",
                    "row_utilization",
                    "same_tokens_as_first",
                    "ours_tpf",
                    "generate_tpf",
                    "ours_mean_steps",
                    "ours_solved_rate",
                    "generate_solved_rate",
                ],
            )
        )
        print(f"wrote {path}")
    return payload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--samples", type=int, default=64, help="puzzles per batch size (at least one full batch)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=None)
    p.add_argument("--out-dir", default=None)
    a = p.parse_args()
    run(a.batch, a.samples, a.threads, a.out_dir, a.model)


if __name__ == "__main__":
    main()
