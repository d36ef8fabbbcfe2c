"""The denoising step eager vs compiled whole (`model.compile=step`, harness.step_graph) on the mid-size CPU model.

Per batch size: host ops per step (what a GPU would launch one by one: top-level dispatcher ops, custom ops and
inductor's fused kernels, counted with the torch profiler), step wall time (median of interleaved runs), the
graphs compiled and the graph breaks (`torch._dynamo.explain`), and the largest difference of the step's
processed logits (compiled - eager; the tokens drawn are compared too). One step = self-conditioning,
decoder layers, LM head and sampler step, on prefilled rows; the eager step is the engine's (`denoise`, then
`sampler_step` with the CPU draw), the compiled one is `WholeStep`'s graph plus its host bookkeeping.

And the commit (the causal re-encode of 3 of 8 rows' canvases) eager vs compiled (`harness.commit_graph`): host
ops, wall time, graphs, the largest difference of the hidden states.

    python -m bench.step_graph [--quick]
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bench.common import interleaved, machine_info, median, print_machine, quick_cli, table, write_json

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


def compare(adapter, b: int, repeats: int, mode: str | None = None) -> dict[str, Any]:
    """One step eager vs compiled at batch b (`mode`: torch.compile's, e.g. "reduce-overhead" on CUDA)."""
    from harness.sampler_step import sampler_step, torch_sampling
    from harness.step_graph import WholeStep
    from samplers.config import EntropyBoundConfig
    from samplers.fast_draw import draw_fast

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

    whole = WholeStep(adapter, cfg, mode=mode)

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


def _explain(whole, state, canvas, history, logits, keys, temperature, b):
    args = whole.graph_args(state, canvas, history, logits.clone(), [True] * b, keys, temperature)
    with torch.no_grad():
        return torch._dynamo.explain(whole.step)(*args)


def compare_commit(adapter, b: int, k: int, repeats: int) -> dict[str, Any]:
    """k of b rows commit (scattered rows): the eager causal re-encode (`adapter.encode_canvas`) vs the compiled
    commit (`harness.commit_graph`, a bucket of k rows). Re-encoding the same canvases rewrites the same slots,
    so every repeat does the same work."""
    from harness.commit_graph import WholeCommit
    from samplers.config import EntropyBoundConfig

    cfg = EntropyBoundConfig()
    e_state, *_ = _setup(adapter, b, cfg)
    c_state, *_ = _setup(adapter, b, cfg)
    rows = list(range(b - 1, -1, -max(1, b // k)))[:k]
    canvas = torch.randint(
        3, adapter.vocab_size, (k, adapter.canvas_length), generator=torch.Generator().manual_seed(k)
    )
    whole = WholeCommit(adapter)

    def eager():
        return adapter.encode_canvas(e_state, canvas, rows)

    def compiled():
        return whole(c_state, canvas, rows)

    t0 = time.perf_counter()
    got = compiled()  # compiles
    compile_s = time.perf_counter() - t0
    ref = eager()
    return {
        "batch": b,
        "committing": k,
        **_side_by_side(eager, compiled, repeats),
        "compile_s": compile_s,
        "graphs": whole.graphs,
        "max_hidden_diff": float((got - ref).abs().max()),
    }


def run(quick: bool = False, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    from bench.engine import MID_DIR, _model
    from models.diffusion_gemma import DiffusionGemmaAdapter

    torch.set_num_threads(1)
    info = machine_info()
    mid = _model(MID_DIR, seed=2, sharpen=8.0, canvas_length=32, hidden=256, layers=4, heads=4, intermediate=512)
    adapter = DiffusionGemmaAdapter(str(mid), dtype="float32", eos_token_ids=[1])
    batches = [1] if quick else [1, 8]
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):  # fused kernels show as profiler ops
        rows = [compare(adapter, b, repeats=2 if quick else 10) for b in batches]
        commits = [compare_commit(adapter, 8, 3, repeats=2 if quick else 10)]
    payload = {"bench": "step_graph", "machine": info, "model": str(mid), "rows": rows, "commits": commits}
    path = write_json("step_graph", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(table(rows, list(rows[0])))
        print(table(commits, list(commits[0])))
        print(f"wrote {path}")
    return payload


def summary_rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for `bench.run_all`'s table: eager (reference) vs compiled (ours), the step and the commit."""

    def row(r: dict, setting: str, note: str) -> dict[str, Any]:
        return {
            "bench": "step_graph",
            "setting": f"{setting} mid model",
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
        row(
            r,
            f"commit {r['committing']} of B={r['batch']}",
            f"compile {r['compile_s']:.0f}s, hidden diff {r['max_hidden_diff']:.1e}",
        )
        for r in p.get("commits", [])
    ]
    return steps + commits


def main() -> None:
    quick_cli(__doc__, run)


if __name__ == "__main__":
    main()
