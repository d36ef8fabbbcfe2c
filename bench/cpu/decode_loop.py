"""Our block-diffusion loop (harness.engine.decode) vs transformers' `generate()` on the same tiny model.

Same settings on both sides (checkpoint defaults: 48 steps, entropy bound 0.1, 0.8 -> 0.4, adaptive
stop). Ours is the engine as the harness runs it, `BlockDiffusionDecoder(...).generate(requests)`:
- `ours_reference` (`random_stream=reference`): the lockstep loop with transformers' global-RNG call order;
  its tokens must equal `generate()`'s token for token (checked and recorded: `same_outputs_reference_mode`);
- `ours_fast` / `ours_exact` (`random_stream=per_sample`, the default): continuous batching, counter-based
  uniforms (`samplers.streams`) into `draw_fast` / `draw_exact`. Other random numbers than `generate()`'s,
  so only wall time and NFE are compared, plus batch invariance: every request decoded alone gives the
  same tokens as in the batch (`fast_batch_invariant`, `exact_batch_invariant`).
Ratio = generate() wall / ours (> 1: ours is faster). Goal: not slower.

    python -m bench.cpu.decode_loop [--batch 1 4] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import interleaved, machine_info, median, print_machine, ratio_stats, table, write_json

PROMPTS = ["hello wo", "abcdefgh", "12345678", "qwertyui"]  # equal lengths: no padding on either side
TINY_DIR = Path("outputs/bench/models/tiny_c16_sharp8")


def tiny_model(path: Path | None = None) -> Path:
    """A partly sharpened tiny checkpoint (canvases stop after varying step counts), built once."""
    path = Path(path or TINY_DIR)
    if not (path / "config.json").exists():
        from models.tiny import build_diffusion

        build_diffusion(path, seed=2, sharpen=8.0, canvas_length=16)
    return path


def _hf_tokens(adapter, ids: torch.Tensor, seed: int, max_new_tokens: int) -> list[list[int]]:
    torch.manual_seed(seed)
    out = adapter.model.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=1, pad_token_id=0)
    return [[t for t in out.sequences[i, ids.shape[1] :].tolist() if t != 0] for i in range(ids.shape[0])]


def _hf_nfe(adapter, ids: torch.Tensor, seed: int, max_new_tokens: int) -> int:
    """Decoder forwards summed over rows, as generate() counts them (a row stops paying once it stopped)."""
    torch.manual_seed(seed)
    out = adapter.model.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=1, pad_token_id=0)
    valid = (out.sequences[:, ids.shape[1] :] != 0).sum(-1)
    return int(torch.nan_to_num(torch.round(valid / out.tokens_per_forward)).sum())  # a row with no valid token: 0/0


def bench_batch(adapter, b: int, repeats: int, max_new_tokens: int = 32, seed: int = 0) -> dict[str, Any]:
    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    ids = torch.tensor([adapter.tokenizer(p).input_ids for p in PROMPTS[:b]])
    reqs = [GenerationRequest(str(i), ids[i].tolist(), seed=1000 + i, max_new_tokens=max_new_tokens) for i in range(b)]
    decoders = {
        mode: BlockDiffusionDecoder(adapter, EntropyBoundConfig(random_stream=stream, draw=draw))
        for mode, stream, draw in [
            ("ours_reference", "reference", "exact"),
            ("ours_fast", "per_sample", "fast"),
            ("ours_exact", "per_sample", "exact"),
        ]
    }

    nfe: dict[str, int] = {}

    def ours(mode: str):
        def call():
            torch.manual_seed(seed)
            res = decoders[mode].generate(reqs)
            nfe[mode] = sum(r.nfe for r in res)  # per_sample modes may stop after other step counts
            return res

        return call

    hf = _hf_tokens(adapter, ids, seed, max_new_tokens)
    mine = ours("ours_reference")()
    same = [r.token_ids for r in mine] == hf
    invariant = {}
    for mode in ("ours_fast", "ours_exact"):  # per-sample streams: a request's tokens do not depend on its batch
        together = [r.token_ids for r in decoders[mode].generate(reqs)]
        alone = [decoders[mode].generate([r])[0].token_ids for r in reqs]
        invariant[mode.replace("ours_", "") + "_batch_invariant"] = together == alone
    fns = {"generate": lambda: _hf_tokens(adapter, ids, seed, max_new_tokens), **{m: ours(m) for m in decoders}}
    times = interleaved(fns, repeats=repeats, warmup=1)
    row: dict[str, Any] = {
        "batch": b,
        "max_new_tokens": max_new_tokens,
        "same_outputs_reference_mode": same,
        "nfe_reference_mode": sum(r.nfe for r in mine),
        "generate_nfe": _hf_nfe(adapter, ids, seed, max_new_tokens),
        **invariant,
        "generate_s": median(times["generate"]),
    }
    for m in decoders:
        row[f"{m}_s"] = median(times[m])
        row[f"{m}_ratio"] = ratio_stats(times["generate"], times[m])["ratio_of_medians"]
        row[f"{m}_nfe"] = nfe[m]
    row["rounds"] = times
    return row


def run(
    batches: list[int],
    repeats: int = 5,
    threads: int | None = 1,
    model_path: str | None = None,
    out_dir: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    from models.diffusion_gemma import DiffusionGemmaAdapter

    if threads:
        torch.set_num_threads(threads)
    path = Path(model_path) if model_path else tiny_model()
    adapter = DiffusionGemmaAdapter(str(path), dtype="float32", device="cpu", eos_token_ids=[1])
    info = machine_info()
    rows = [bench_batch(adapter, b, repeats) for b in batches]
    payload = {"bench": "decode_loop", "machine": info, "model": str(path), "repeats": repeats, "rows": rows}
    out = write_json("decode_loop", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(
            table(
                rows,
                [
                    "batch",
                    "same_outputs_reference_mode",
                    "fast_batch_invariant",
                    "generate_s",
                    "ours_reference_s",
                    "ours_reference_ratio",
                    "ours_fast_s",
                    "ours_fast_ratio",
                    "ours_fast_nfe",
                    "ours_exact_s",
                    "ours_exact_ratio",
                    "ours_exact_nfe",
                ],
            )
        )
        print(f"wrote {out}")
    return payload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=None, help="a DiffusionGemma checkpoint folder (default: a tiny one, built once)")
    p.add_argument("--out-dir", default=None)
    a = p.parse_args()
    run(a.batch, a.repeats, a.threads, a.model, a.out_dir)


if __name__ == "__main__":
    main()
