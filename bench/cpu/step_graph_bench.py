"""The denoising step eager vs compiled whole (`model.compile=step`, harness.engine.step_graph) on the mid-size CPU
model.

Per batch size: host ops per step (what a GPU would launch one by one: top-level dispatcher ops, custom ops and
inductor's fused kernels, counted with the torch profiler), step wall time (median of interleaved runs), the
graphs compiled and the graph breaks (`torch._dynamo.explain`), and the largest difference of the step's
processed logits (compiled - eager; the tokens drawn are compared too). One step = self-conditioning,
decoder layers, LM head and sampler step, on prefilled rows; the eager step is the engine's (`denoise`, then
`sampler_step` with the CPU draw), the compiled one is `WholeStep`'s graph plus its host bookkeeping.

And a step in which 3 of 8 rows commit (the causal re-encode of their finished canvases): eager, as two graphs
(commit, then step) and as one (`WholeStep.with_commit`, the compiled engine): host ops, wall time, graphs, the
largest differences of the logits and the committed hidden states.

    python -m bench.cpu.step_graph_bench [--quick]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import interleaved, machine_info, median, print_machine, quick_cli, table, write_json

PROMPTS = ["hello world", "a longer prompt goes here", "12 34 56", "x", "lorem ipsum dolor sit", "qwerty"]
OP_PREFIXES = ("aten::", "transformers::", "cpp_fused", "triton_")


def host_ops(fn) -> int:
    """Ops `fn` issues at the top level: dispatcher ops, custom ops and compiled kernels, not those nested
    in another op (an op's own sub-ops are one launch from the host's point of view)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()

    def is_op(e) -> bool:
        return e.name.startswith(OP_PREFIXES) or "cpp_fused" in e.name

    count = 0
    for e in prof.events():
        if not is_op(e):
            continue
        parent = e.cpu_parent
        while parent is not None and not is_op(parent):
            parent = parent.cpu_parent
        count += parent is None
    return count


def _setup(adapter, b: int, cfg):
    c, v, dev = adapter.canvas_length, adapter.vocab_size, adapter.device
    prompts = [adapter.encode(PROMPTS[i % len(PROMPTS)] + str(i)) for i in range(b)]
    state = adapter.prefill(prompts, adapter.open(b, c), grow=2 * c)
    g = torch.Generator().manual_seed(b)
    keys = torch.tensor([[i for i in range(b)], [0] * b, [1] * b], device=dev)
    canvas = torch.randint(0, v, (b, c), generator=g).to(dev)
    history = torch.full((cfg.stability_steps, b, c), -1, device=dev)
    logits = torch.randn(b, c, v, generator=g).to(dev)  # the previous step's processed logits: all rows self-condition
    return state, canvas, history, logits, keys


def compare(adapter, b: int, repeats: int, mode: str | None = None, backend: str = "inductor") -> dict[str, Any]:
    """One step eager vs compiled at batch b (`mode`: torch.compile's, e.g. "reduce-overhead" on CUDA; `backend`
    "aot_eager" captures the same graph without inductor's code generation: the quick run's wiring check)."""
    from harness.engine.step_graph import WholeStep
    from samplers.config import EntropyBoundConfig
    from samplers.fast_draw import draw_fast
    from samplers.sampler_step import sampler_step, torch_sampling

    cfg = EntropyBoundConfig()
    e_state, e_canvas, e_hist, e_logits, keys = _setup(adapter, b, cfg)
    c_state, c_canvas, c_hist, c_logits, _ = _setup(adapter, b, cfg)
    sc_rows = [True] * b
    temperature = cfg.temperatures(keys[2])
    masks = adapter.canvas_masks(e_state, adapter.canvas_length, b)
    start = e_logits.clone()
    eager_draw = torch_sampling(draw_fast)

    @torch.no_grad()
    def eager():
        e_logits.copy_(start)
        x = adapter.denoise(e_state, e_canvas, masks, e_logits, sc_rows, out=e_logits)
        return sampler_step(
            cfg, eager_draw, x, temperature, adapter.softcap, keys, e_canvas, e_hist, adapter.vocab_size
        )

    whole = WholeStep(adapter, cfg, backend=backend, mode=mode)

    def compiled():
        c_logits.copy_(start)
        return whole(c_state, c_canvas, c_hist, c_logits, sc_rows, keys, temperature)

    t0 = time.perf_counter()
    got = compiled()  # compiles
    compile_s = time.perf_counter() - t0
    ref = eager()
    same_tokens = bool(torch.equal(got.canvas, ref.canvas) and torch.equal(got.argmax, ref.argmax))
    max_diff = float((c_logits - e_logits).abs().max())
    measured = _side_by_side(eager, compiled, repeats, str(adapter.device))  # before `explain` compiles it again
    explain = _explain(whole, c_state, c_canvas, c_hist, c_logits, keys, temperature, b)
    return {
        "batch": b,
        **measured,
        "compile_s": compile_s,
        "graphs": whole.graphs,
        "graph_breaks": explain.graph_break_count,
        "max_logits_diff": max_diff,
        "same_tokens": same_tokens,
    }


def _side_by_side(eager, compiled, repeats: int, device: str = "cpu") -> dict[str, Any]:
    """Host ops of one call each, then median wall times of interleaved calls (synchronised on CUDA)."""
    ops = {"eager": host_ops(eager), "compiled": host_ops(compiled)}
    times = interleaved({"eager": eager, "compiled": compiled}, repeats=repeats, device=device)
    return {
        "eager_host_ops": ops["eager"],
        "compiled_host_ops": ops["compiled"],
        "eager_ms": 1e3 * median(times["eager"]),
        "compiled_ms": 1e3 * median(times["compiled"]),
        "speedup": median(times["eager"]) / median(times["compiled"]),
    }


def _three_ways(eager, two, one, repeats: int, device: str) -> dict[str, Any]:
    """`_side_by_side` for a commit step: eager, as two graphs and folded into one."""
    ops = {name: host_ops(fn) for name, fn in (("eager", eager), ("two", two), ("one", one))}
    times = interleaved({"eager": eager, "two": two, "one": one}, repeats=repeats, device=device)
    return {
        "eager_host_ops": ops["eager"],
        "two_graphs_host_ops": ops["two"],
        "folded_host_ops": ops["one"],
        "eager_ms": 1e3 * median(times["eager"]),
        "two_graphs_ms": 1e3 * median(times["two"]),
        "folded_ms": 1e3 * median(times["one"]),
        "speedup": median(times["eager"]) / median(times["one"]),
    }


def _explain(whole, state, canvas, history, logits, keys, temperature, b):
    args = whole.graph_args(state, canvas, history, logits.clone(), [True] * b, keys, temperature)
    with torch.no_grad():
        return torch._dynamo.explain(whole.step)(*args)


def compare_fold(
    adapter, b: int, k: int, repeats: int, mode: str | None = None, backend: str = "inductor"
) -> dict[str, Any]:
    """A step in which k of b rows (scattered) commit the canvas they finished: eager (`adapter.encode_canvas`,
    then `denoise` and `sampler_step`: the eager engine), as two graphs (`harness.engine.commit_graph.WholeCommit`, then
    `WholeStep`: the compiled engine before commits folded into steps) and as one (`WholeStep.with_commit`).
    Re-encoding the same canvases rewrites the same slots, so every repeat does the same work. `mode`, `backend`:
    as `compare`'s."""
    from harness.engine.commit_graph import WholeCommit
    from harness.engine.step_graph import WholeStep
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig
    from samplers.fast_draw import draw_fast
    from samplers.sampler_step import sampler_step, torch_sampling

    adapter = DiffusionGemmaAdapter.from_model(adapter.model, adapter.tokenizer, eos_token_ids=[1], compile="step")
    cfg = EntropyBoundConfig()
    c = adapter.canvas_length
    states = {name: _setup(adapter, b, cfg) for name in ("eager", "two", "one")}
    keys = states["eager"][4]
    rows = list(range(b - 1, -1, -max(1, b // k)))[:k]
    commit = torch.randint(3, adapter.vocab_size, (k, c), generator=torch.Generator().manual_seed(k))
    commit = commit.to(adapter.device)  # the generator is a CPU one: on a GPU the canvas must move
    sc_rows = [r not in rows for r in range(b)]
    temperature = cfg.temperatures(keys[2])
    start = states["eager"][3].clone()
    draw = torch_sampling(draw_fast)
    commit_graph = WholeCommit(adapter, backend=backend, mode=mode)
    step_graph = WholeStep(adapter, cfg, backend=backend, mode=mode)

    def moved(state, sign: int) -> None:  # the committed rows' lengths, after (+1) or back before (-1) the commit
        for r in rows:
            state.lengths[r] += sign * c

    @torch.no_grad()
    def eager():
        state, canvas, history, logits, _ = states["eager"]
        logits.copy_(start)
        hidden = adapter.encode_canvas(state, commit, rows)
        moved(state, 1)
        masks = adapter.canvas_masks(state, c, b)
        x = adapter.denoise(state, canvas, masks, logits, sc_rows, out=logits)
        out = sampler_step(cfg, draw, x, temperature, adapter.softcap, keys, canvas, history, adapter.vocab_size)
        moved(state, -1)
        return out, hidden

    def two():
        state, canvas, history, logits, _ = states["two"]
        logits.copy_(start)
        hidden = commit_graph(state, commit, rows)
        moved(state, 1)
        out = step_graph(state, canvas, history, logits, sc_rows, keys, temperature)
        moved(state, -1)
        return out, hidden

    def one():
        state, canvas, history, logits, _ = states["one"]
        logits.copy_(start)
        return step_graph.with_commit(state, canvas, history, logits, sc_rows, keys, temperature, commit, rows)

    t0 = time.perf_counter()
    two()
    one()  # compiles
    compile_s = time.perf_counter() - t0
    (ref, ref_hidden), (got, got_hidden) = eager(), one()
    return {
        "batch": b,
        "committing": k,
        **_three_ways(eager, two, one, repeats, str(adapter.device)),
        "compile_s": compile_s,
        "graphs": commit_graph.graphs + step_graph.graphs,
        "max_logits_diff": float((states["one"][3] - states["eager"][3]).abs().max()),
        "max_hidden_diff": float((got_hidden - ref_hidden).abs().max()),
        "same_tokens": bool(torch.equal(got.canvas, ref.canvas) and torch.equal(got.argmax, ref.argmax)),
    }


def run(quick: bool = False, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    from bench.cpu.engine import MID_DIR, _model
    from models.diffusion_gemma import DiffusionGemmaAdapter

    torch.set_num_threads(1)
    info = machine_info()
    mid = _model(MID_DIR, seed=2, sharpen=8.0, canvas_length=32, hidden=256, layers=4, heads=4, intermediate=512)
    adapter = DiffusionGemmaAdapter(str(mid), dtype="float32", eos_token_ids=[1])
    batches = [1] if quick else [1, 8]
    # quick: the wiring only (graph capture, host ops, breaks, same tokens), without inductor's C++ compiles (minutes
    # on 2 cores; tests/test_step_graph.py checks inductor's graphs), so its speedups mean nothing
    backend = "aot_eager" if quick else "inductor"
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):  # fused kernels show as profiler ops
        rows = [compare(adapter, b, repeats=2 if quick else 10, backend=backend) for b in batches]
        commits = [compare_fold(adapter, 8, 3, repeats=2 if quick else 10, backend=backend)]
    payload = {
        "bench": "step_graph", "machine": info, "model": str(mid), "backend": backend, "rows": rows, "commits": commits
    }  # fmt: skip
    path = write_json("step_graph", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(table(rows, list(rows[0])))
        print(table(commits, list(commits[0])))
        print(f"wrote {path}")
    return payload


def summary_rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for `bench.cpu.run_all`'s table: eager (reference) vs compiled (ours), the step and the commit."""
    model = f"{Path(p['model']).name}, {p.get('backend', 'inductor')}"

    def row(r: dict, setting: str, note: str) -> dict[str, Any]:
        return {
            "bench": "step_graph",
            "setting": f"{setting} {model}",
            "reference": f"{r['eager_ms']:.1f}ms {r['eager_host_ops']} ops",
            "ours": f"{r['compiled_ms']:.1f}ms {r['compiled_host_ops']} ops",
            "ratio": r["speedup"],
            "note": f"{r['graphs']} graph, {note}",
        }

    steps = [
        row(
            r,
            f"B={r['batch']}",
            f"{r['graph_breaks']} breaks, compile {r['compile_s']:.0f}s, logits diff {r['max_logits_diff']:.1e}, "
            f"same tokens {r['same_tokens']}",
        )
        for r in p["rows"]
    ]
    commits = [
        {
            "bench": "step_graph",
            "setting": f"step + commit {r['committing']} of B={r['batch']} {model}",
            "reference": f"{r['eager_ms']:.1f}ms {r['eager_host_ops']} ops",
            "ours": f"{r['folded_ms']:.1f}ms {r['folded_host_ops']} ops",
            "ratio": r["speedup"],
            "note": f"one graph (two: {r['two_graphs_ms']:.1f}ms {r['two_graphs_host_ops']} ops), logits diff "
            f"{r['max_logits_diff']:.1e}, hidden diff {r['max_hidden_diff']:.1e}, same tokens {r['same_tokens']}",
        }
        for r in p.get("commits", [])
    ]
    return steps + commits


def main() -> None:
    quick_cli(__doc__, run)


if __name__ == "__main__":
    main()
