"""The AR engine bench's workload and contenders (`bench.cpu.ar_engine`, `bench.cpu.ar_concurrency`): the shipped 6x6
Sudoku
models, the harness's own Sudoku prompts as requests, our engine's stream and a bare `generate()` on left-padded
batches, and an interleaved race of contenders that keeps each one's last output."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import interleaved

TARGET = Path("models/checkpoints/sudoku6_ar")
DRAFT = Path("models/checkpoints/sudoku6_ar_draft")
DIFFUSION = Path("models/checkpoints/sudoku6_diffusion")
EVAL_CONF = Path("conf/eval/sudoku6.yaml")
K = 4  # draft tokens per verify step
VARIED = (8, 80)  # per-request max_new_tokens range of the varied-length workload
CPU_NOTE = "CPU figures (tiny 6x6 Sudoku models, float32, 1 thread): not what a GPU would show"


# --- inputs ---------------------------------------------------------------------------------------------
def sudoku_eval(n: int):
    """The harness's Sudoku eval (conf/eval/sudoku6.yaml) capped at n puzzles."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from contract.paths import resolve_path

    return instantiate(OmegaConf.load(resolve_path(EVAL_CONF)), num_puzzles=n)


def requests(decoder, ev, n: int, max_new_tokens: list[int] | None = None, run_seed: int = 0):
    """GenerationRequests for the first n eval items, as the harness builds them (per-sample seeds)."""
    from contract.records import GenerationRequest
    from contract.text import sample_seed

    items = ev.items()[:n]
    assert len(items) == n, f"the eval has {len(items)} puzzles, {n} asked for"
    lengths = max_new_tokens or [ev.max_new_tokens] * n
    return [
        GenerationRequest(
            it.sample_id, decoder.encode(it.prompt), sample_seed(run_seed, it.sample_id), m, list(ev.stop_strings)
        )
        for it, m in zip(items, lengths, strict=True)
    ]


def varied_lengths(n: int, lo: int, hi: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


# --- contenders -----------------------------------------------------------------------------------------
def ours(decoder, reqs, b: int) -> dict[str, list[int]]:
    return {r.sample_id: r.token_ids for r in decoder.stream(reqs, batch_size=b)}


def cut_row(dec, row: list[int], req) -> list[int]:
    from contract.text import cut_at_stop

    return cut_at_stop(dec.tokenizer, row[: req.max_new_tokens], set(dec.eos_ids), req.stop_strings)[0]


def hf_generate(dec, reqs, b: int, **extra) -> dict[str, list[int]]:
    """Bare `generate()` on consecutive left-padded batches of b; each row cut at its own length and EOS."""
    out: dict[str, list[int]] = {}
    for s in range(0, len(reqs), b):
        chunk = reqs[s : s + b]
        width = max(len(r.prompt_ids) for r in chunk)
        ids = torch.full((len(chunk), width), dec.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, r in enumerate(chunk):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        with torch.no_grad():
            seqs = dec.model.generate(
                ids.to(dec.device),
                attention_mask=mask.to(dec.device),
                max_new_tokens=max(r.max_new_tokens for r in chunk),
                do_sample=False,
                eos_token_id=dec.eos_ids,
                pad_token_id=dec.pad_id,
                **extra,
            )
        for r, row in zip(chunk, seqs[:, width:].tolist(), strict=True):
            out[r.sample_id] = cut_row(dec, row, r)
    return out


def count_tokens(out: dict[str, list[int]]) -> int:
    return sum(len(t) for t in out.values())


def race(fns: dict, repeats: int) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Interleaved timing (one warm-up round) keeping each contender's last output."""
    last: dict[str, Any] = {}

    def keep(name, fn):
        def call():
            last[name] = fn()

        return call

    times = interleaved({n: keep(n, f) for n, f in fns.items()}, repeats=repeats, warmup=1)
    return times, last


def same_tokens(a: dict[str, list[int]], b: dict[str, list[int]]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] for k in a)
