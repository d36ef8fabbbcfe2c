"""`bench.gpu.fusion`: the model of what a compiled graph moves, on op sequences small enough to check by hand.

(Its totals against inductor's own count of the whole compiled step: tests/test_gpu_plan.py.)"""

from __future__ import annotations

from bench.gpu.fusion import fuse, totals

F32 = 4


def op(name, kind, rd, wr, ins, outs):
    return {"op": f"aten.{name}.default", "kind": kind, "rd": rd, "wr": wr, "ins": ins, "outs": outs}


def t(*shape):
    return (shape, F32, "a", None)


def test_a_chain_between_two_matmuls_is_one_kernel_that_writes_only_what_leaves_it():
    # W1, W2: weights (storages 1, 2); x (3) -> mm -> h (10) -> add -> a (11) -> mul -> m (12) -> mm -> y (13)
    ops = [
        op("mm", "mm", [3, 1], [10], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
        op("add", "elt", [10, 3], [11], [t(8, 4), t(8, 4)], [((8, 4), F32)]),
        op("view", "view", [11], [11], [t(8, 4)], [((32,), F32)]),
        op("mul", "elt", [11, 10], [12], [t(32), t(8, 4)], [((8, 4), F32)]),
        op("mm", "mm", [12, 2], [13], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
    ]
    fuse(ops)
    add, view, mul = ops[1], ops[2], ops[3]
    assert add["kernel"] == mul["kernel"] != ops[0]["kernel"] != ops[4]["kernel"]
    assert view["kernel"] == -1 and view["launch"] == 0
    assert [o["launch"] for o in ops] == [1, 1, 0, 0, 1]
    assert add["mem_in"] == [1, 1] and add["mem_out"] == [0]  # a stays in the kernel
    assert mul["mem_in"] == [0, 0]  # a from inside; h already read once by this kernel (by add)
    assert mul["mem_out"] == [1]  # read by the second matmul
    # mm: x, W1, h; the fused add + mul: h, x in, m out; mm: m, W2, y (elements)
    assert totals(ops) == {"kernels": 3, "bytes": F32 * ((32 + 16 + 32) + (32 + 32 + 32) + (32 + 16 + 32))}


def test_writes_into_a_buffer_that_existed_before_are_kept_and_dead_ends_are_outputs():
    # cache (5) existed before the graph: a scatter into it is written even though nothing reads it after; an op
    # with no input from the kernel before it is a kernel of its own (no horizontal fusion in the model)
    ops = [
        op("mul", "elt", [3], [10], [t(2, 2)], [((2, 2), F32)]),
        op("index_put_", "elt", [10], [5], [t(2, 2)], [((2, 2), F32)]),
        op("add", "elt", [3, 7], [11], [t(2, 2), t(2, 2)], [((2, 2), F32)]),
    ]
    fuse(ops)
    assert ops[0]["mem_out"] == [0] and ops[1]["mem_in"] == [0]
    assert ops[1]["mem_out"] == [1]  # into the cache
    assert ops[2]["mem_out"] == [1]  # nothing reads it: a graph output
    assert ops[2]["mem_in"] == [1, 1] and ops[2]["kernel"] != ops[0]["kernel"]
    assert totals(ops)["kernels"] == 2


def test_nothing_fuses_across_an_extern_kernel():
    # e (10) -> sort (extern) -> s (11); an op after the sort that reads e and s starts a new kernel
    ops = [
        op("exp", "elt", [3], [10], [t(4)], [((4,), F32)]),
        op("sort", "elt", [10], [11], [t(4)], [((4,), F32)]),
        op("add", "elt", [10, 11], [12], [t(4), t(4)], [((4,), F32)]),
    ]
    fuse(ops)
    assert len({o["kernel"] for o in ops}) == 3
    assert ops[0]["mem_out"] == [1]  # read by the sort and by the kernel after it
    assert ops[2]["mem_in"] == [1, 1]


def test_a_pointwise_kernel_fuses_into_its_consumer_past_an_independent_matmul():
    # inductor's schedule of gelu(x @ Wg) * (x @ Wu): one kernel after both matmuls, which reads both outputs
    # (g 10 -> gelu -> a 11; u 12; a * u -> m 13 -> mm); a reduction's kernel stays before the matmul
    ops = [
        op("mm", "mm", [3, 1], [10], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
        op("gelu", "elt", [10], [11], [t(8, 4)], [((8, 4), F32)]),
        op("mm", "mm", [3, 2], [12], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
        op("mul", "elt", [11, 12], [13], [t(8, 4), t(8, 4)], [((8, 4), F32)]),
        op("mm", "mm", [13, 4], [14], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
    ]
    fuse(ops)
    gelu, mul = ops[1], ops[3]
    assert gelu["kernel"] == mul["kernel"] and gelu["mem_out"] == [0] and mul["mem_in"] == [0, 1]
    assert totals(ops)["kernels"] == 4
    ops[1] = op("sum", "elt", [10], [11], [t(8, 4)], [((8, 1), F32)])  # a row sum instead: its own kernel
    ops[3] = op("mul", "elt", [11, 12], [13], [t(8, 1), t(8, 4)], [((8, 4), F32)])
    fuse(ops)
    assert ops[1]["kernel"] != ops[3]["kernel"] and ops[1]["mem_out"] == [1]


def test_a_kernel_never_fuses_past_a_matmul_that_needs_it():
    # softmax(l) @ E then an add of the softmax: the add cannot join the softmax's kernel (a cycle through the mm)
    ops = [
        op("exp", "elt", [3], [10], [t(8, 4)], [((8, 4), F32)]),
        op("mm", "mm", [10, 1], [11], [t(8, 4), t(4, 4)], [((8, 4), F32)]),
        op("add", "elt", [10, 11], [12], [t(8, 4), t(8, 4)], [((8, 4), F32)]),
    ]
    fuse(ops)
    assert ops[0]["kernel"] != ops[2]["kernel"] and ops[0]["mem_out"] == [1] and ops[2]["mem_in"] == [1, 1]
