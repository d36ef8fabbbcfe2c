"""The AR engine (continuous batching on per-row KV slots, `harness.engine.ar`) vs transformers, side by side.

On the shipped 6x6 Sudoku models (target models/checkpoints/sudoku6_ar, draft models/checkpoints/sudoku6_ar_draft)
with the harness's own prompts (`conf/eval/sudoku6.yaml`: the held-out puzzles, compact format, 36 new tokens),
greedy, float32, one thread, all in one process with interleaved repeats (medians):

1. `ARDecoder.stream` vs a bare `model.generate()` on left-padded batches of the same size, at B = 1, 16, 64:
   valid tokens/s (cut at EOS as `contract.text.cut_at_stop` does), ours / generate, identical tokens;
2. the same at B = 64 on requests whose outputs end at different lengths (max_new_tokens drawn per request
   from 8..80; the Sudoku model never stops by itself), where continuous batching refills finished rows and
   `generate()` runs each batch to its longest row;
3. batched AR + draft (`AssistedARDecoder`, k = 4, constant schedule) at B = 1, 4, 16 vs transformers'
   assisted generation (one request at a time): tokens/s, TPF (tokens / target forwards), our B = 16 / B = 1,
   and tokens identical to greedy AR;
4. per-user tokens/s (mean of tokens / latency) and total tokens/s (all tokens / wall) vs concurrency for AR,
   AR + draft and the diffusion decoder (models/checkpoints/sudoku6_diffusion through
   `harness.engine.decode.BlockDiffusionDecoder`, default entropy-bound sampler); figure ar_engine_scaling.png.

These are CPU figures (a tiny model, one thread): per-step host overheads weigh far more than on a GPU.
The workload and the contenders are `bench.cpu.ar_workload`; section 4 and its figure are `bench.cpu.ar_concurrency`.

    python -m bench.cpu.ar_engine [--quick] [--out-dir outputs/bench]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from bench.cpu.ar_concurrency import concurrency, plot
from bench.cpu.ar_workload import (
    CPU_NOTE,
    DIFFUSION,
    DRAFT,
    EVAL_CONF,
    TARGET,
    VARIED,
    K,
    count_tokens,
    hf_generate,
    ours,
    race,
    requests,
    same_tokens,
    sudoku_eval,
    varied_lengths,
)
from bench.cpu.common import OUT_DIR, machine_info, median, print_machine, table, write_json

FULL = {
    "ar_batches": {1: 16, 16: 64, 64: 128},  # batch -> puzzles
    "ar_repeats": 5,
    "varied": {"batch": 64, "requests": 256, "repeats": 5},
    "draft_batches": [1, 4, 16],
    "draft_requests": 32,
    "draft_repeats": 3,
    "concurrency": [1, 2, 4, 8, 16, 32, 64],
    "concurrency_requests": lambda c: max(8, 2 * c),
    "concurrency_repeats": 3,
}
QUICK = {
    "ar_batches": {1: 2, 16: 16, 64: 64},
    "ar_repeats": 1,
    "varied": {"batch": 64, "requests": 128, "repeats": 1},
    "draft_batches": [1, 4, 16],
    "draft_requests": 16,
    "draft_repeats": 1,
    "concurrency": [1, 4, 16],
    "concurrency_requests": lambda c: max(4, c),
    "concurrency_repeats": 1,
}


# --- sections -------------------------------------------------------------------------------------------
def ar_vs_generate(dec, ev, batches: dict[int, int], repeats: int) -> list[dict[str, Any]]:
    return [_ar_pair(dec, requests(dec, ev, n), b, repeats) for b, n in batches.items()]


def _ar_pair(dec, reqs, b: int, repeats: int) -> dict[str, Any]:
    fns = {"ours": lambda: ours(dec, reqs, b), "generate": lambda: hf_generate(dec.model, reqs, b)}
    times, out = race(fns, repeats)
    return _pair_row(b, reqs, times, out)


def _pair_row(b, reqs, times, out) -> dict[str, Any]:
    tok_ours, tok_hf = count_tokens(out["ours"]), count_tokens(out["generate"])
    t_ours, t_hf = median(times["ours"]), median(times["generate"])
    return {
        "batch": b,
        "requests": len(reqs),
        "tokens": tok_ours,
        "ours_tokens_per_s": tok_ours / t_ours,
        "generate_tokens_per_s": tok_hf / t_hf,
        "ratio": (tok_ours / t_ours) / (tok_hf / t_hf),
        "median_round_ratio": median([h / o for o, h in zip(times["ours"], times["generate"])]),
        "same_tokens": same_tokens(out["ours"], out["generate"]),
        "ours_s": t_ours,
        "generate_s": t_hf,
        "rounds": times,
    }


def varied_length(dec, ev, batch: int, n: int, repeats: int) -> dict[str, Any]:
    lengths = varied_lengths(n, *VARIED)
    reqs = requests(dec, ev, n, max_new_tokens=lengths)
    stats: list[dict[str, float]] = []

    def run_ours():
        o = ours(dec, reqs, batch)
        stats.append(dict(dec.engine.stats))
        return o

    times, out = race({"ours": run_ours, "generate": lambda: hf_generate(dec.model, reqs, batch)}, repeats)
    row = _pair_row(batch, reqs, times, out)
    steps_hf = sum(max(lengths[s : s + batch]) for s in range(0, n, batch))
    row.update(
        {
            "max_new_tokens_range": list(VARIED),
            "mean_length": sum(lengths) / n,
            "ours_row_utilization": stats[-1]["row_utilization"],
            "ours_decode_steps": stats[-1]["steps"],
            "ours_prefill_forwards": stats[-1]["prefill_forwards"],
            "generate_decode_steps": steps_hf,
            "generate_row_utilization": sum(lengths) / (steps_hf * batch),
        }
    )
    return row


def hf_assisted(target, draft_model, reqs) -> tuple[dict[str, list[int]], int]:
    """transformers' assisted generation, one request at a time; (tokens, target forwards)."""
    from bench.cpu.forward_counter import ForwardCounter

    out, forwards = {}, 0
    with ForwardCounter(target.model) as fc:
        for r in reqs:
            out.update(hf_generate(target, [r], 1, assistant_model=draft_model))
    forwards += fc.count
    return out, forwards


def draft_section(target, dr, ev, batches: list[int], n: int, repeats: int) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from contract.paths import resolve_path

    hf_draft = AutoModelForCausalLM.from_pretrained(resolve_path(DRAFT), dtype=torch.float32).eval()
    gc = hf_draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = K, "constant", 0.0
    reqs = requests(dr, ev, n)
    greedy = hf_generate(target, reqs, len(reqs))  # the target's greedy tokens (checked against ours in section 1)
    nfe: dict[str, int] = {}
    hf_forwards = [0]

    def run_ours(b):
        def call():
            res = list(dr.stream(reqs, batch_size=b))
            nfe[f"ours_b{b}"] = sum(r.nfe for r in res)
            return {r.sample_id: r.token_ids for r in res}

        return call

    def run_hf():
        o, hf_forwards[0] = hf_assisted(target, hf_draft, reqs)
        return o

    fns = {f"ours_b{b}": run_ours(b) for b in batches} | {"assisted_b1": run_hf}
    times, out = race(fns, repeats)
    rows = []
    for name, ts in times.items():
        toks = count_tokens(out[name])
        forwards = nfe.get(name, hf_forwards[0])
        rows.append(
            {
                "decoder": "transformers assisted" if name == "assisted_b1" else "ours",
                "batch": 1 if name == "assisted_b1" else int(name.removeprefix("ours_b")),
                "requests": n,
                "tokens": toks,
                "tokens_per_s": toks / median(ts),
                "target_forwards": forwards,
                "tpf": toks / forwards if forwards else 0.0,
                "same_tokens": same_tokens(out[name], greedy),
                "median_s": median(ts),
                "rounds": ts,
            }
        )
    ours_rows = {r["batch"]: r for r in rows if r["decoder"] == "ours"}
    hf = next(r for r in rows if r["decoder"] != "ours")
    top = max(ours_rows)
    return {
        "num_draft_tokens": K,
        "rows": rows,
        f"ours_b{top}_over_b1": ours_rows[top]["tokens_per_s"] / ours_rows[1]["tokens_per_s"],
        "ours_b1_over_assisted_b1": ours_rows[1]["tokens_per_s"] / hf["tokens_per_s"],
        f"ours_b{top}_over_assisted_b1": ours_rows[top]["tokens_per_s"] / hf["tokens_per_s"],
    }


# --- run ------------------------------------------------------------------------------------------------
def summary_rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for `bench.cpu.run_all`'s table (bench, setting, reference, ours, ratio, note)."""
    rows = [
        {
            "bench": "ar_engine",
            "setting": f"AR B={r['batch']} n={r['requests']}",
            "reference": f"{r['generate_tokens_per_s']:.0f}tok/s",
            "ours": f"{r['ours_tokens_per_s']:.0f}tok/s",
            "ratio": r["ratio"],
            "note": f"vs generate(); same tokens {r['same_tokens']}",
        }
        for r in p["ar_vs_generate"]
    ]
    v = p["varied_length"]
    rows.append(
        {
            "bench": "ar_engine",
            "setting": f"AR varied B={v['batch']} n={v['requests']}",
            "reference": f"{v['generate_tokens_per_s']:.0f}tok/s",
            "ours": f"{v['ours_tokens_per_s']:.0f}tok/s",
            "ratio": v["ratio"],
            "note": f"max_new_tokens {VARIED[0]}..{VARIED[1]}; util {v['ours_row_utilization']:.2f} vs "
            f"{v['generate_row_utilization']:.2f}; same tokens {v['same_tokens']}",
        }
    )
    d = p["draft"]
    hf = next(r for r in d["rows"] if r["decoder"] != "ours")
    for r in (r for r in d["rows"] if r["decoder"] == "ours"):
        rows.append(
            {
                "bench": "ar_engine",
                "setting": f"AR+draft B={r['batch']} k={d['num_draft_tokens']}",
                "reference": f"{hf['tokens_per_s']:.0f}tok/s",
                "ours": f"{r['tokens_per_s']:.0f}tok/s",
                "ratio": r["tokens_per_s"] / hf["tokens_per_s"],
                "note": f"vs assisted B=1; tpf {r['tpf']:.2f} vs {hf['tpf']:.2f}; same tokens {r['same_tokens']}",
            }
        )
    return rows


def run(quick: bool = False, out_dir: str | Path | None = None, quiet: bool = False) -> dict[str, Any]:
    from contract.paths import resolve_path
    from harness.engine.decode import BlockDiffusionDecoder
    from harness.engine.decoders import decoder_for
    from models.ar import ARDecoder, AssistedARDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig

    cfg = QUICK if quick else FULL
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    out = Path(out_dir) if out_dir else OUT_DIR
    common = {"dtype": "float32", "device": "cpu", "num_threads": 1}
    target, draft_path, diffusion = (str(resolve_path(p)) for p in (TARGET, DRAFT, DIFFUSION))  # from any cwd
    dec = decoder_for(ARDecoder(target, **common), None)
    dr = decoder_for(AssistedARDecoder(target, draft_path=draft_path, num_draft_tokens=K, **common), None)
    diff = BlockDiffusionDecoder(
        DiffusionGemmaAdapter(diffusion, dtype="float32", device="cpu", eos_token_ids=[1]), EntropyBoundConfig()
    )
    need = max(
        max(cfg["ar_batches"].values()),
        cfg["varied"]["requests"],
        cfg["draft_requests"],
        *(cfg["concurrency_requests"](c) for c in cfg["concurrency"]),
    )
    ev = sudoku_eval(need)
    info = machine_info()

    ar_rows = ar_vs_generate(dec, ev, cfg["ar_batches"], cfg["ar_repeats"])
    v = cfg["varied"]
    varied = varied_length(dec, ev, v["batch"], v["requests"], v["repeats"])
    draft = draft_section(dec.model, dr, ev, cfg["draft_batches"], cfg["draft_requests"], cfg["draft_repeats"])
    conc = concurrency(
        {"AR": dec, f"AR + draft (k={K})": dr, "diffusion": diff},
        ev,
        cfg["concurrency"],
        cfg["concurrency_requests"],
        cfg["concurrency_repeats"],
    )
    fig = plot(conc, out / "ar_engine_scaling.png")
    payload = {
        "bench": "ar_engine",
        "note": CPU_NOTE,
        "quick": quick,
        "machine": info,
        "models": {"target": str(TARGET), "draft": str(DRAFT), "diffusion": str(DIFFUSION)},
        "eval": {"conf": str(EVAL_CONF), "max_new_tokens": ev.max_new_tokens, "format": ev.format},
        "ar_vs_generate": ar_rows,
        "varied_length": varied,
        "draft": draft,
        "concurrency": conc,
        "figure": str(fig),
        "targets": {"varied_length_ratio": 1.3, "draft_b16_over_b1": 3.0},
    }
    payload["summary"] = summary_rows(payload)
    payload["total_s"] = time.perf_counter() - t_start
    path = write_json("ar_engine", payload, out)
    if not quiet:
        print_machine(info)
        print(f"NOTE: {CPU_NOTE}")
        print("\n1-2. AR engine vs generate() (tokens/s of valid tokens; ratio = ours / generate)")
        print(
            table(
                ar_rows + [{**varied, "batch": f"{varied['batch']} varied {VARIED[0]}..{VARIED[1]}"}],
                [
                    "batch",
                    "requests",
                    "tokens",
                    "ours_tokens_per_s",
                    "generate_tokens_per_s",
                    "ratio",
                    "median_round_ratio",
                    "same_tokens",
                ],
            )
        )
        print(
            f"varied: row utilization ours {varied['ours_row_utilization']:.2f}, "
            f"generate {varied['generate_row_utilization']:.2f} (target ratio >= 1.3)"
        )
        print(f"\n3. AR + draft (k={K}, constant) vs transformers' assisted generation at B=1 (identical = greedy AR)")
        print(
            table(
                draft["rows"],
                ["decoder", "batch", "requests", "tokens", "tokens_per_s", "target_forwards", "tpf", "same_tokens"],
            )
        )
        top = max(cfg["draft_batches"])
        print(
            f"ours B={top} / ours B=1: {draft[f'ours_b{top}_over_b1']:.2f}x (target >= 3); "
            f"ours B=1 / assisted B=1: {draft['ours_b1_over_assisted_b1']:.2f}x"
        )
        print("\n4. tokens/s vs concurrency")
        print(table(conc, ["decoder", "concurrency", "requests", "per_user_tokens_per_s", "total_tokens_per_s"]))
        print(f"\nwrote {path} and {fig} ({payload['total_s']:.0f}s; {CPU_NOTE})")
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer puzzles, one repeat (under a minute)")
    p.add_argument("--out-dir", default=str(OUT_DIR))
    a = p.parse_args(argv)
    return run(quick=a.quick, out_dir=a.out_dir)


if __name__ == "__main__":
    main()
