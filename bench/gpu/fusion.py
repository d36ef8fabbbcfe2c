"""What a compiled graph moves: an inductor-like fusion of a traced op sequence (pure Python, no torch).

`bench.gpu.op_trace` (for `bench.gpu.gpu_plan`) records every aten op of one eager call of the whole compiled step
(`harness.engine.step_graph`) with the storage each tensor lives in. `fuse` then marks which of those tensors a compiled
graph would actually move through memory, by the rules inductor follows:

- matmuls, grouped matmuls, attention and the ops inductor does not generate code for (`EXTERN`) are kernels of
  their own that read every input and write every output;
- views move nothing;
- every other op (pointwise, reductions, casts, gathers, scatters) joins the fused kernels of the ops that produced
  its inputs, as inductor's scheduler fuses a producer into its consumer, except a kernel that an extern kernel
  this op needs depends on (fusing would make a cycle), and past an extern kernel only a kernel without a
  reduction: `gelu(x @ Wg) * (x @ Wu)` is one kernel after both matmuls, `softmax(l) @ E` keeps the softmax
  before the matmul, a norm before a matmul stays its own kernel. A fused kernel reads each input from outside it
  once and writes only what is used outside it, what lives in a buffer that existed before the graph (the K/V
  slots, the logits workspace), or what nothing reads (the graph's outputs).

This is a model of inductor, not inductor: it reads a large input once where inductor's softmax and reduction
loops may read it two or three times, and it does not split a run into several kernels where iteration domains
differ. `tests/test_gpu_plan.py` compares its totals with inductor's own count of the same graph on the CPU
(`torch._inductor.metrics`), and `make gpu-plan` prints that comparison.
"""

from __future__ import annotations

import math
import re

EXTERN_KINDS = ("mm", "gmm", "sdpa", "moe")  # moe: `models.kernels.fused_moe`'s kernels (custom ops)
# ops inductor runs as a kernel of their own: ATen fallbacks (no generated code, nothing fuses into them), and
# cumsum (a scan kernel on CUDA, a fallback on the CPU)
EXTERN = re.compile(
    r"aten\.(sort|topk|argsort|nonzero|multinomial|unique|_local_scalar_dense|searchsorted|histc|cumsum|bincount)\b"
)


# indexed reads: they pick elements of their source (fusion: not a reduction; `bench.gpu.op_costs`: their source costs
# at most what they pick)
GATHER = re.compile(r"aten\.(gather|index|index_select|take|embedding)\b")


def is_extern(op: dict) -> bool:
    return op["kind"] in EXTERN_KINDS or bool(EXTERN.match(op["op"]))


def _reduces(op: dict) -> bool:
    """A reduction: fewer output elements than its largest input (a gather picks, it does not reduce)."""
    if GATHER.match(op["op"]):
        return False
    most = max((math.prod(s) for s, *_ in op["ins"]), default=0)
    return any(math.prod(s) < most for s, *_ in op["outs"])


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
    group: list[int | None] = [None] * len(ops)
    src: list[list[int | None]] = []  # per op, per input: the op that produced it (None: from outside)
    # bitsets of kernel ids: all kernels an op depends on, and those it depends on through an extern kernel
    deps: list[int] = [0] * len(ops)
    through: list[int] = [0] * len(ops)
    members: dict[int, int] = {}  # a kernel's root -> the bitset of the kernel ids merged into it
    reduces: dict[int, bool] = {}  # a kernel's root -> whether one of its ops reduces
    last_run: dict[int, int] = {}  # a kernel's root -> the run (extern kernels seen so far) of its latest op
    run = 0
    for i, op in enumerate(ops):
        src.append([None if p is None else producer.get(p) for p in op["rd"]])
        for p, s in zip(op["rd"], src[-1], strict=True):
            if p is not None and s is None:
                preexisting.add(p)
        if op["kind"] == "view":
            continue  # an alias: the storage's producer is unchanged (so no op reads from a view op)
        inputs = [s for s in src[-1] if s is not None]
        for s in inputs:
            deps[i] |= deps[s]
            through[i] |= deps[s] if is_extern(ops[s]) else through[s]
        if is_extern(op):  # a kernel of its own: nothing fuses with it
            run += 1
            g = groups.new()
            members[g], reduces[g] = 1 << g, False
        else:  # joins its producers' kernels: see the module's docstring
            mates = {groups.find(group[s]) for s in inputs if group[s] is not None and not is_extern(ops[s])}
            mates = sorted(m for m in mates if not members[m] & through[i] and (last_run[m] == run or not reduces[m]))
            if mates:
                g = mates[0]
                for m in mates[1:]:
                    bits, red = members.pop(m) | members.pop(g), reduces.pop(m) or reduces.pop(g)
                    g = groups.union(g, m)
                    members[g], reduces[g] = bits, red
            else:
                g = groups.new()
                members[g], reduces[g] = 1 << g, False
            reduces[g] = reduces[g] or _reduces(op)
        group[i], last_run[g] = g, run
        deps[i] |= 1 << g
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
