"""What a compiled graph moves: an inductor-like fusion of a traced op sequence (pure Python, no torch).

`bench.op_trace` (for `bench.gpu_plan`) records every aten op of one eager call of the whole compiled step
(`harness.step_graph`) with the storage each tensor lives in. `fuse` then marks which of those tensors a compiled
graph would actually move through memory, by the rules inductor follows:

- matmuls, grouped matmuls, attention and the ops inductor does not generate code for (`EXTERN`) are kernels of
  their own that read every input and write every output;
- views move nothing;
- every other op (pointwise, reductions, casts, gathers, scatters) joins the fused kernel of the op that produced
  one of its inputs, if that op is in the same run of non-extern ops (a run ends at an extern kernel, so fusing
  never reorders across one). A fused kernel reads each input from outside it once and writes only what is used
  outside it, what lives in a buffer that existed before the graph (the K/V slots, the logits workspace), or
  what nothing reads (the graph's outputs).

This is a model of inductor, not inductor: it reads a large input once where inductor's softmax and reduction
loops may read it two or three times, and it does not split a run into several kernels where iteration domains
differ. `tests/test_gpu_plan.py` compares its totals with inductor's own count of the same graph on the CPU
(`torch._inductor.metrics`), and `make gpu-plan` prints that comparison.
"""

from __future__ import annotations

import math
import re

EXTERN_KINDS = ("mm", "gmm", "sdpa")
# ops inductor runs as a kernel of their own: ATen fallbacks (no generated code, nothing fuses into them), and
# cumsum (a scan kernel on CUDA, a fallback on the CPU)
EXTERN = re.compile(
    r"aten\.(sort|topk|argsort|nonzero|multinomial|unique|_local_scalar_dense|searchsorted|histc|cumsum|bincount)\b"
)


def is_extern(op: dict) -> bool:
    return op["kind"] in EXTERN_KINDS or bool(EXTERN.match(op["op"]))


class _Groups:
    """Union-find over fused-kernel ids."""

    def __init__(self):
        self.parent: list[int] = []

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int) -> int:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)
        return min(a, b)


def fuse(ops: list[dict]) -> list[dict]:
    """Mark each op (a dict with "kind", "op", "rd": the storage of each input, "wr": of each output) with
    `mem_in` / `mem_out` (which of its tensors move through memory), `launch` (1 if it starts a kernel) and
    `kernel` (its kernel's id). Returns the ops, marked in place."""
    groups = _Groups()
    producer: dict[int, int] = {}  # storage -> the op that last wrote it
    preexisting: set[int] = set()  # storages read before any op of the trace wrote them (weights, buffers)
    run = 0  # runs of non-extern ops are separated by extern kernels
    run_of: dict[int, int] = {}
    group: list[int | None] = [None] * len(ops)
    src: list[list[int | None]] = []  # per op, per input: the op that produced it (None: from outside)
    for i, op in enumerate(ops):
        src.append([None if p is None else producer.get(p) for p in op["rd"]])
        for p, s in zip(op["rd"], src[-1], strict=True):
            if p is not None and s is None:
                preexisting.add(p)
        if op["kind"] == "view":
            continue  # an alias: the storage's producer is unchanged
        if is_extern(op):  # a run of its own: nothing fuses with it
            run += 1
            group[i], run_of[i] = groups.new(), run
            run += 1
        else:
            mates = [group[s] for s in src[-1] if s is not None and group[s] is not None and run_of[s] == run]
            g = groups.new() if not mates else mates[0]
            for m in mates[1:]:
                g = groups.union(g, m)
            group[i], run_of[i] = g, run
        for p in op["wr"]:
            if p is not None:
                producer[p] = i
    final = [None if g is None else groups.find(g) for g in group]
    readers: dict[int, set] = {}  # producing op -> the kernels that read what it wrote
    for i in range(len(ops)):
        if final[i] is None:
            continue
        for s in src[i]:
            if s is not None:
                readers.setdefault(s, set()).add(final[i])
    seen_in: set[tuple[int, int]] = set()
    started: set[int] = set()
    for i, op in enumerate(ops):
        g = final[i]
        if g is None:
            op["mem_in"], op["mem_out"], op["launch"], op["kernel"] = [0] * len(op["rd"]), [0] * len(op["wr"]), 0, -1
            continue
        mem_in = []
        for p, s in zip(op["rd"], src[i], strict=True):
            inside = s is not None and final[s] == g
            first = p is None or (g, p) not in seen_in
            if p is not None:
                seen_in.add((g, p))
            mem_in.append(int(not inside and first))
        used = readers.get(i, set())
        mem_out = [int(p is None or p in preexisting or not used or bool(used - {g})) for p in op["wr"]]
        op["mem_in"], op["mem_out"] = mem_in, mem_out
        op["launch"], op["kernel"] = int(g not in started), g
        started.add(g)
    return ops


def totals(ops: list[dict]) -> dict[str, int]:
    """Kernels and bytes moved by marked ops at their traced shapes (what `torch._inductor.metrics` counts)."""
    nbytes = 0
    for op in ops:
        for (shape, size, *_), m in zip(op["ins"], op["mem_in"], strict=True):
            nbytes += m * math.prod(shape) * size
        for (shape, size), m in zip(op["outs"], op["mem_out"], strict=True):
            nbytes += m * math.prod(shape) * size
    return {"kernels": sum(op["launch"] for op in ops), "bytes": nbytes}
