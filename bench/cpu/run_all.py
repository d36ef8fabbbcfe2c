"""`make bench`: the CPU benches in one go (about 20 minutes on the 2-core box), one summary table.

1. sampler step, ours vs transformers' (B = 1, 4; 256 x 262,144 float32 logits; 2 threads);
2. decode loop, ours vs `generate()` on a tiny model (reference mode must give identical tokens);
3. Sudoku throughput vs batch size (1, 4, 16, 64) on the shipped checkpoint: our engine (continuous batching)
   vs `generate()`, row utilization, and whether every sample's tokens equal those at batch 1;
4. the engine's own costs: extra logits memory in U (ours vs `generate()`), host syncs per step and loop
   overhead at B = 1, 8, 32 (bench.cpu.engine);
5. the AR engine vs `generate()` / assisted generation on the Sudoku AR models, and tokens/s vs concurrency
   for AR, AR + draft and diffusion (bench.cpu.ar_engine; ratio there = ours / reference tokens/s);
6. the K/V bytes copied per commit / admission (bench.cpu.cache_copies);
7. the denoising step eager vs compiled whole (`model.compile=step`) on the mid-size model at B = 1, 8: host ops
   per step, step time, graphs, graph breaks, logits difference (bench.cpu.step_graph_bench; ratio = eager / compiled);
8. the masked decoder vs diffusers' LLaDA2Pipeline on a tiny block-causal model, identical greedy tokens, batch 1
   and 16 on the same 64 prompts (rows refilled at 16; bench.cpu.masked_bench; ratio = pipeline / ours wall), and
   its own tokens/s at batch 16 over batch 1;
9. our engine vs diffusers' DiffusionGemmaPipeline on the shipped Sudoku model, same sampler: solved rate and TPF
   with intervals, tokens/s at batch 1, 16, 64 (bench.cpu.diffusers_bench; ratio = ours / pipeline tokens/s);
10. masked ELBO requests/s at mc_num 128, batched Monte-Carlo samples vs a plain loop over them, same estimates
   (bench.cpu.likelihood_bench; ratio = loop wall / ours).
Ratios are reference wall / ours (> 1: ours is faster), medians of interleaved runs in one process.

    python -m bench.cpu.run_all [--quick] [--out-dir outputs/bench]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.cpu import (
    ar_engine,
    cache_copies,
    decode_loop,
    diffusers_bench,
    engine,
    eval_throughput,
    likelihood_bench,
    masked_bench,
    sampler_step_bench,
    step_graph_bench,
)
from bench.cpu.common import OUT_DIR, machine_info, print_machine, table, write_json


def summary_rows(sampler: dict, decode: dict, throughput: dict, eng: dict | None = None) -> list[dict[str, Any]]:
    rows = []
    for r in sampler["rows"]:
        rows.append(
            {
                "bench": "sampler_step",
                "setting": f"B={r['batch']} C={r['canvas']} V={r['vocab']}",
                "reference": f"{r['reference_s']:.3f}s",
                "ours": f"{r['ours_s']:.3f}s",
                "ratio": r["ratio_of_medians"],
                "note": f"net {r['net_ratio_of_medians']:.1f}x; argmax equal {r['argmax_equal']}",
            }
        )
    for r in decode["rows"]:
        for mode in ("ours_reference", "ours_fast", "ours_exact"):
            note = (
                f"same tokens: {r['same_outputs_reference_mode']}"
                if mode == "ours_reference"
                else f"nfe {r[mode + '_nfe']} vs {r['nfe_reference_mode']}"
            )
            rows.append(
                {
                    "bench": "decode_loop",
                    "setting": f"B={r['batch']} {mode}",
                    "reference": f"{r['generate_s']:.3f}s",
                    "ours": f"{r[mode + '_s']:.3f}s",
                    "ratio": r[f"{mode}_ratio"],
                    "note": note,
                }
            )
    for r in throughput["rows"]:
        rows.append(
            {
                "bench": "sudoku_throughput",
                "setting": f"B={r['batch']} n={r['samples']}",
                "reference": f"{r['generate_samples_per_s']:.2f}/s",
                "ours": f"{r['ours_samples_per_s']:.2f}/s",
                "ratio": r["ratio"],
                "note": f"{r['vs_first_batch']:.2f}x ours at B={throughput['rows'][0]['batch']}, "
                f"util {r['row_utilization']:.2f}, same tokens {r['same_tokens_as_first']}, "
                f"solved {r['ours_solved_rate']:.2f} vs {r['generate_solved_rate']:.2f}, tpf {r['ours_tpf']:.2f}",
            }
        )
    if eng:
        m = eng["memory"]
        rows.append(
            {
                "bench": "engine_memory",
                "setting": f"B={m['batch']} C={m['canvas']} V={m['vocab']}",
                "reference": f"{m['generate_extra_U']:.2f}U",
                "ours": f"{m['ours_extra_U']:.2f}U",
                "ratio": m["generate_extra_U"] / m["ours_extra_U"] if m["ours_extra_U"] else 0.0,
                "note": f"extra logits memory, U = {m['U_GB']:.3f} GB",
            }
        )
        for r in eng["rows"]:
            rows.append(
                {
                    "bench": "engine_overhead",
                    "setting": f"B={r['batch']} n={r['samples']}",
                    "reference": "-",
                    "ours": f"{r['overhead_ms_per_step']:.1f}ms/step",
                    "ratio": 0.0,
                    "note": f"{r['overhead_share']:.0%} of wall outside the model; "
                    f"{r['host_syncs_per_step']:.2f} host syncs/step",
                }
            )
    return rows


def family_rows(masked: dict, diffusers: dict) -> list[dict[str, Any]]:
    """The two reference implementations from diffusers: LLaDA2Pipeline (masked) and DiffusionGemmaPipeline."""
    rows = [
        {
            "bench": "masked_vs_llada2_pipeline",
            "setting": f"B={r['batch']} x{r['prompts']} prompt={r['prompt_tokens']} new={r['new_tokens_per_row']}",
            "reference": f"{r['pipeline_s']:.3f}s",
            "ours": f"{r['ours_s']:.3f}s",
            "ratio": r["ratio_of_medians"],
            "note": f"identical tokens {r['identical_tokens']}; "
            f"row forwards {r['ours_row_forwards']} vs {r['pipeline_row_forwards']}",
        }
        for r in masked["rows"]
    ]
    sc = masked["ours_scaling"]
    rows.append(
        {
            "bench": "masked_batch_scaling",
            "setting": f"B={sc['batch']} vs B={sc['vs_batch']}, same prompts",
            "reference": f"B={sc['vs_batch']} tok/s",
            "ours": f"B={sc['batch']} tok/s",
            "ratio": sc["ratio_of_medians"],
            "note": f"paired per round {sc['median_round_ratio']:.2f}x",
        }
    )
    for r in diffusers["speed"]:
        rows.append(
            {
                "bench": "engine_vs_diffusion_gemma_pipeline",
                "setting": f"B={r['batch']}",
                "reference": f"{r['diffusers_tok_s']:.1f} tok/s",
                "ours": f"{r['engine_tok_s']:.1f} tok/s",
                "ratio": r["engine_over_diffusers"],
                "note": f"rows still denoising: ours {r['engine_row_utilization']:.2f}, "
                f"pipeline {r['diffusers_row_utilization']:.2f}",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (a smoke run, seconds)")
    p.add_argument("--out-dir", default=str(OUT_DIR))
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    if a.quick:
        sampler = sampler_step_bench.run([1, 2], canvas=8, vocab=300, repeats=1, out_dir=a.out_dir, quiet=True)
        decode = decode_loop.run([1], repeats=1, out_dir=a.out_dir, quiet=True)
        throughput = eval_throughput.run([1, 2], samples=2, out_dir=a.out_dir, quiet=True)
        eng = engine.run(quick=True, out_dir=a.out_dir, quiet=True)
        arx = ar_engine.run(quick=True, out_dir=a.out_dir, quiet=True)
        cc = cache_copies.run(quick=True, out_dir=a.out_dir, quiet=True)
        sg = step_graph_bench.run(quick=True, out_dir=a.out_dir, quiet=True)
        masked = masked_bench.run(quick=True, out_dir=a.out_dir, quiet=True)
        diff = diffusers_bench.run(quick=True, out_dir=a.out_dir)
        elbo = likelihood_bench.run(quick=True, out_dir=a.out_dir, quiet=True)
    else:
        sampler = sampler_step_bench.run([1, 4], repeats=3, threads=2, out_dir=a.out_dir)
        decode = decode_loop.run([1, 4], repeats=5, threads=1, out_dir=a.out_dir)
        throughput = eval_throughput.run([1, 4, 16, 64], samples=64, threads=1, out_dir=a.out_dir)
        eng = engine.run(out_dir=a.out_dir)
        arx = ar_engine.run(out_dir=a.out_dir)
        cc = cache_copies.run(out_dir=a.out_dir)
        sg = step_graph_bench.run(out_dir=a.out_dir)
        masked = masked_bench.run(out_dir=a.out_dir)
        diff = diffusers_bench.run(out_dir=a.out_dir)
        elbo = likelihood_bench.run(out_dir=a.out_dir)
    rows = summary_rows(sampler, decode, throughput, eng) + ar_engine.summary_rows(arx) + cache_copies.summary_rows(cc)
    rows += step_graph_bench.summary_rows(sg) + family_rows(masked, diff) + likelihood_bench.summary_rows(elbo)
    info = machine_info()
    payload = {
        "bench": "run_all",
        "quick": a.quick,
        "machine": info,
        "total_s": time.perf_counter() - t0,
        "rows": rows,
        "model": throughput["model"],
    }
    path = write_json("summary", payload, a.out_dir)
    print()
    print_machine(info)
    print(f"sudoku model: {throughput['model']}")
    print(table(rows, ["bench", "setting", "reference", "ours", "ratio", "note"]))
    print(f"ratio = reference wall / ours (> 1: ours faster); total {payload['total_s']:.0f}s; wrote {path}")
    return payload


if __name__ == "__main__":
    main()
