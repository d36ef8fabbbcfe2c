"""Score a trained compact-format checkpoint on held-out puzzles with transformers' own `generate()`.

Independent of the harness decode loop (so a checkpoint can be judged on its own): diffusion models use
the checkpoint's reference sampler defaults (48 steps, entropy bound 0.1, temperature 0.8 -> 0.4, adaptive
stop); AR models decode greedily (TPF 1). TPF = total answer tokens / total decoder forwards.
`reference_decode` is the one such path: this CLI and the in-training probe (`evals.sudoku.train`) use it.

    python -m evals.sudoku.check models/checkpoints/sudoku6_diffusion [--puzzles FILE] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from evals.sudoku.eval import SudokuEval

DEFAULT_PUZZLES = str(Path(__file__).resolve().parent / "data" / "sudoku6_test.jsonl")


@torch.no_grad()
def reference_decode(
    model, tokenizer, ev: SudokuEval, batch_size: int = 50, max_denoising_steps: int = 48, desc: str | None = None
) -> list[dict[str, Any]]:
    """`ev`'s compact-format puzzles decoded by transformers' own `generate()` and scored by `ev`.

    Diffusion checkpoints (`model_type` diffusion_gemma) use their generation defaults, the reference sampler,
    with `max_denoising_steps`; AR checkpoints decode greedily. Draws from the global torch RNG (seed it first
    for a repeatable run). One row per puzzle: `meta`, `text`, the `ev.score` figures, `tpf` and `forwards`
    (decoder forward passes; every row is a full N*N canvas, no EOS). `desc` shows a progress bar.
    """
    diffusion = model.config.model_type == "diffusion_gemma"
    items = ev.items()
    cells = ev.size * ev.size
    dev = next(model.parameters()).device
    rows: list[dict[str, Any]] = []
    for start in tqdm(range(0, len(items), batch_size), desc=desc, unit="batch", disable=desc is None):
        batch = items[start : start + batch_size]
        ids = torch.tensor([tokenizer(it.prompt, add_special_tokens=False)["input_ids"] for it in batch], device=dev)
        if diffusion:
            out = model.generate(
                ids,
                max_new_tokens=cells,
                max_denoising_steps=max_denoising_steps,
                pad_token_id=0,
                eos_token_id=tokenizer.eos_token_id,
            )
            seqs = out.sequences[:, -cells:]
            tpf = torch.as_tensor(out.tokens_per_forward).float().cpu()
        else:
            seqs = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=cells,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=tokenizer.eos_token_id,
            )[:, -cells:]
            tpf = torch.ones(len(batch))
        for it, row, t, f in zip(batch, seqs.tolist(), tpf.tolist(), (cells / tpf).tolist()):
            text = tokenizer.decode(row, skip_special_tokens=True)
            rows.append({"meta": it.meta, "text": text, **ev.score(it, text), "tpf": t, "forwards": f})
    return rows


def check(
    path: str,
    puzzles: str = DEFAULT_PUZZLES,
    limit: int | None = None,
    batch_size: int = 50,
    seed: int = 0,
    max_denoising_steps: int = 48,
) -> dict:
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    diffusion = cfg.model_type == "diffusion_gemma"
    if diffusion:
        from transformers import DiffusionGemmaForBlockDiffusion as cls
    else:
        from transformers import Gemma4ForCausalLM as cls
    model = cls.from_pretrained(path).eval()
    meta = Path(path) / "train_config.json"  # written by evals.sudoku.train; AR configs carry no canvas length
    size = json.loads(meta.read_text())["size"] if meta.exists() else int(round(cfg.canvas_length**0.5))
    ev = SudokuEval(
        size=size,
        path=puzzles,
        num_puzzles=limit,  # None: every puzzle of the file
        format="compact",
        limit=limit,
        bucket_edges=[18, 21, 24, 27] if size == 6 else None,
    )
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    rows = reference_decode(model, tok, ev, batch_size, max_denoising_steps, desc=f"check {Path(path).name}")
    tokens, forwards = size * size * len(rows), sum(r["forwards"] for r in rows)
    m = ev.summarize(rows)
    m.update(
        {
            "tpf": tokens / forwards,
            "mean_forwards_per_puzzle": forwards / len(rows),
            "wall_time_s": time.perf_counter() - t0,
            "model": path,
            "puzzles": puzzles,
            "decoding": "reference sampler" if diffusion else "greedy",
        }
    )
    return m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--puzzles", default=DEFAULT_PUZZLES)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # shipped checkpoints are local; never reach for the hub
    torch.set_num_threads(a.threads)
    m = check(a.path, a.puzzles, a.limit, a.batch_size)
    print(json.dumps(m, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(m, indent=1))


if __name__ == "__main__":
    main()
