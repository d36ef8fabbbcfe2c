"""The decode engine's costs outside the model: extra logits memory, host syncs and loop overhead.

1. Extra memory per run in U (U = one float32 B x C x V tensor) at the real canvas and vocabulary
   (C = 256, V = 262,144) on a narrow random DiffusionGemma: the peak of the CPU allocator's live bytes
   during a decode, above what was live before it (the KV cache is tiny here, so this is the logits
   memory), for our engine and for transformers' `generate()` side by side.
2. Host syncs per denoising step outside the model's forwards (`aten::_local_scalar_dense`, counted with
   the torch profiler) at several batch sizes.
3. Loop overhead at B = 1, 8, 32 on a mid-size model: decode wall time minus the time inside the model's
   own calls (prefill, denoise, commit), per step and as a share of the wall.

    python -m bench.cpu.engine [--quick]
"""

from __future__ import annotations

import bisect
import time
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import machine_info, print_machine, quick_cli, table, write_json

WIDE_DIR = Path("outputs/bench/models/narrow_v262144_c256")
MID_DIR = Path("outputs/bench/models/mid_h256_l4_c32")
PROMPTS = ["hello world", "a longer prompt goes here", "12 34 56", "x", "lorem ipsum dolor sit", "qwerty"]


def _model(path: Path, **kw) -> Path:
    if not (path / "config.json").exists():
        from models.tiny import build_diffusion

        build_diffusion(path, **kw)
    return path


def _requests(adapter, n: int, max_new_tokens: int):
    from contract.records import GenerationRequest

    return [
        GenerationRequest(
            f"s{i}", adapter.encode(PROMPTS[i % len(PROMPTS)] + str(i)), seed=i, max_new_tokens=max_new_tokens
        )
        for i in range(n)
    ]


def peak_extra_bytes(fn) -> int:
    """Peak live CPU bytes allocated while `fn` runs, above the level at its start.

    From the profiler's memory records: allocations are charged to the op that made them (its *self*
    memory, so nested ops are not counted twice), frees arrive as `[memory]` records; replayed in time
    order, the running sum's maximum is the peak."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    deltas = []
    for e in prof.events():
        d = e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        if d:
            deltas.append((e.time_range.start, d))
    live = peak = 0
    for _, d in sorted(deltas, key=lambda t: t[0]):
        live += d
        peak = max(peak, live)
    return peak


def memory_in_u(batch: int = 2, steps: int = 3, vocab: int = 262_144, canvas: int = 256) -> dict[str, Any]:
    from harness.engine.decode import BlockDiffusionDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from samplers.config import EntropyBoundConfig

    path = _model(
        WIDE_DIR if vocab == 262_144 and canvas == 256 else WIDE_DIR.with_name(f"narrow_v{vocab}_c{canvas}"),
        seed=0,
        canvas_length=canvas,
        hidden=64,
        layers=2,
        heads=2,
        intermediate=64,
        vocab_size=vocab,
    )
    adapter = DiffusionGemmaAdapter(str(path), dtype="float32", eos_token_ids=[1])
    u_bytes = batch * canvas * adapter.vocab_size * 4
    cfg = EntropyBoundConfig(max_steps=steps, adaptive_stop=False)
    dec = BlockDiffusionDecoder(adapter, cfg)
    reqs = _requests(adapter, batch, canvas)
    ours = peak_extra_bytes(lambda: list(dec.stream(reqs, batch_size=batch)))
    ids = torch.tensor([adapter.encode(f"same length {i}") for i in range(batch)])

    def hf():
        torch.manual_seed(0)
        adapter.model.generate(ids, max_new_tokens=canvas, max_denoising_steps=steps, pad_token_id=0, eos_token_id=1)

    theirs = peak_extra_bytes(hf)
    return {
        "batch": batch,
        "canvas": canvas,
        "vocab": adapter.vocab_size,
        "U_GB": u_bytes / 1e9,
        "ours_extra_U": ours / u_bytes,
        "generate_extra_U": theirs / u_bytes,
    }


def count_syncs(dec, reqs, batch_size: int) -> tuple[float, list]:
    """(host syncs per denoising step, results): `aten::_local_scalar_dense` events (profiler) outside the
    model's own calls (prefill, denoise, commit, masks), while `dec` streams `reqs`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    adapter = dec.model
    inner = {name: getattr(adapter, name) for name in ("denoise", "prefill", "commit", "canvas_masks")}

    def wrap(name, fn):
        def call(*a, **k):
            with record_function(f"model::{name}"):
                return fn(*a, **k)

        return call

    for name, fn in inner.items():
        setattr(adapter, name, wrap(name, fn))
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            results = list(dec.stream(reqs, batch_size=batch_size))
    finally:
        for name in inner:
            delattr(adapter, name)
    events = prof.events()
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name.startswith("model::"))
    starts = [a for a, _ in spans]

    def inside_model(e) -> bool:  # model calls never overlap: only the last span starting before e can hold it
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        return i >= 0 and e.time_range.end <= spans[i][1]

    syncs = [e for e in events if e.name == "aten::_local_scalar_dense" and not inside_model(e)]
    steps = sum(1 for e in events if e.name == "model::denoise")
    return len(syncs) / max(1, steps), results


def syncs_per_step(adapter, batch: int, n: int, max_new_tokens: int) -> float:
    """Device reads per denoising step that are not inside the model's own calls (default sampler)."""
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig())
    return count_syncs(dec, _requests(adapter, n, max_new_tokens), batch)[0]


def loop_overhead(adapter, batch: int, n: int, max_new_tokens: int) -> dict[str, Any]:
    """Wall time of a decode minus the time spent in the model's own calls."""
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig())
    spent = {"model": 0.0, "steps": 0}
    names = ("denoise", "prefill", "commit")

    def wrap(name, fn):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent["model"] += time.perf_counter() - t0
                spent["steps"] += name == "denoise"

        return call

    for name in names:
        setattr(adapter, name, wrap(name, getattr(adapter, name)))
    try:
        t0 = time.perf_counter()
        res = list(dec.stream(_requests(adapter, n, max_new_tokens), batch_size=batch))
        wall = time.perf_counter() - t0
    finally:
        for name in names:
            delattr(adapter, name)
    overhead = wall - spent["model"]
    return {
        "batch": batch,
        "samples": len(res),
        "steps": spent["steps"],
        "wall_s": wall,
        "overhead_ms_per_step": 1000 * overhead / max(1, spent["steps"]),
        "overhead_share": overhead / wall,
    }


def run(quick: bool = False, out_dir: str | None = None, quiet: bool = False) -> dict[str, Any]:
    from models.diffusion_gemma import DiffusionGemmaAdapter

    torch.set_num_threads(1)
    info = machine_info()
    mem = memory_in_u(batch=1, steps=2, vocab=4096, canvas=32) if quick else memory_in_u()
    mid = _model(MID_DIR, seed=2, sharpen=8.0, canvas_length=32, hidden=256, layers=4, heads=4, intermediate=512)
    adapter = DiffusionGemmaAdapter(str(mid), dtype="float32", eos_token_ids=[1])
    batches = [1, 8] if quick else [1, 8, 32]
    n, new = (8, 32) if quick else (64, 64)
    rows = []
    for b in batches:
        row = loop_overhead(adapter, b, n, new)
        row["host_syncs_per_step"] = syncs_per_step(adapter, b, min(n, 2 * b), new)
        rows.append(row)
    payload = {"bench": "engine", "machine": info, "memory": mem, "rows": rows}
    path = write_json("engine", payload, **({"out_dir": out_dir} if out_dir else {}))
    if not quiet:
        print_machine(info)
        print(table([mem], list(mem)))
        print(
            table(
                rows,
                [
                    "batch",
                    "samples",
                    "steps",
                    "wall_s",
                    "overhead_ms_per_step",
                    "overhead_share",
                    "host_syncs_per_step",
                ],
            )
        )
        print(f"wrote {path}")
    return payload


def main() -> None:
    quick_cli(__doc__, run)


if __name__ == "__main__":
    main()
