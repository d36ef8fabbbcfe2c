"""Op recording for the GPU cost model (`bench.gpu.gpu_plan`): run a callable on the CPU twin under
`FlopCounterMode` and a `TorchDispatchMode` that records every aten op, the module and phase it ran in, its
tensor shapes, dtypes and storages, and compact the records per (part, layer type, op, shapes).

`bench.gpu.op_costs` rescales the records to the real widths and contexts; `bench.gpu.fusion` marks what a compiled
graph's fused kernels move (`Tracer.run(..., fused=True)`). Shapes only by default: matmuls and attention return
zeros of the right shape (`compute=True` runs them too; the same records, tested).
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode

from bench.gpu.fusion import fuse, totals
from models.kernels import fused_moe

NO_KERNEL = {
    "aten._unsafe_view.default",
    "aten.empty.memory_format",
    "aten.empty_strided.default",
    "aten.lift_fresh.default",
}
# in-place scatters into a buffer (the K/V slots): they read the source and the index, and write the source's size
SCATTER = re.compile(r"aten\.(index_put_|_index_put_impl_|index_copy_|scatter_)\.")
SCATTER_SOURCE = {"index_put_": 2, "_index_put_impl_": 2, "index_copy_": 3, "scatter_": 3}


class _Modules:
    """The module each op runs in (full dotted names from the root), the phase of a forward (`pre` before the
    first layer, `body`, `head` after the final norm, `post` after the root's forward) and a segment counter
    (calls of `segment_module`)."""

    def __init__(self, root: torch.nn.Module, segment_module: torch.nn.Module | None = None):
        self.names = {id(m): (n or "root") for n, m in reversed(list(root.named_modules(remove_duplicate=False)))}
        self.root, self.segment_module = root, segment_module
        self.stack: list[str] = []
        self.phase, self.segment = "pre", 0

    def _pre(self, mod, _inp):
        name = self.names.get(id(mod), type(mod).__name__)
        self.stack.append(name)
        if mod is self.segment_module:
            self.segment += 1
            self.phase = "pre"
        if re.search(r"layers\.\d+$", name):
            self.phase = "body"

    def _post(self, mod, _inp, _out):
        name = self.stack.pop() if self.stack else ""
        if name.endswith(".norm") and "layers." not in name and self.phase == "body":
            self.phase = "head"
        if mod is self.root:
            self.phase = "post"

    def __enter__(self):
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._h = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        # generate() may call `self.forward` directly (no module hooks): mark its return too
        self._forward = self.root.__dict__.get("forward")
        bound = self.root.forward

        def forward(*a, **k):
            out = bound(*a, **k)
            self.phase = "post"
            return out

        self.root.forward = forward
        return self

    def __exit__(self, *exc):
        for h in self._h:
            h.remove()
        if self._forward is None:
            del self.root.forward
        else:
            self.root.forward = self._forward

    @property
    def path(self) -> str:
        return self.stack[-1] if self.stack else ""


def _kind(func) -> str:
    name = str(func)
    if func.is_view or name in NO_KERNEL:
        return "view"
    if "_grouped_mm" in name:
        return "gmm"
    if name.startswith("dgemma.moe_"):  # models.kernels.fused_moe's kernels: grouped matmuls reading rows by index
        return "moe"
    if "scaled_dot_product" in name:
        return "sdpa"
    if re.match(r"aten\.(mm|addmm|bmm|baddbmm)\.", name):
        return "mm"
    return "elt"


class _Recorder(TorchDispatchMode):
    """Records every aten op that reaches the dispatcher: name, kind, module, phase, tensor shapes and roles
    (weight / tied embedding / expert weight / activation, from the parameters' storages)."""

    def __init__(self, modules: _Modules, params: dict[int, tuple[str, str]], compute: bool = False):
        super().__init__()
        self.modules, self.params, self.compute = modules, params, compute
        self.ops: list[dict] = []
        self._ids: dict[int, int] = {}  # storage address -> the id of the storage that lives there now
        self._storages = 0

    def _id(self, t: torch.Tensor, fresh: bool = False) -> int | None:
        """A storage's id for `bench.gpu.fusion`: stable while it lives, new for a fresh allocation (the allocator
        reuses freed addresses, so an address alone would tie a new tensor to a dead one, differently from run
        to run)."""
        ptr = _storage(t)
        if ptr is None:
            return None
        if fresh or ptr not in self._ids:
            self._ids[ptr], self._storages = self._storages, self._storages + 1
        return self._ids[ptr]

    def _tensor(self, t: torch.Tensor):
        try:
            name, role = self.params.get(t.untyped_storage().data_ptr(), (None, "a"))
        except (RuntimeError, NotImplementedError):
            name, role = None, "a"
        # a broadcast (stride-0) axis is read once: record it as 1 (an expanded K/V reads its real heads)
        shape = tuple(1 if st == 0 and d > 1 else d for d, st in zip(t.shape, t.stride()))
        return (shape, t.element_size(), role, name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _kind(func)
        out = (
            func(*args, **kwargs)
            if (self.compute and (kind != "moe" or fused_moe.available(args[0].device)))
            or kind not in ("mm", "gmm", "sdpa", "moe")
            else _shape_only(func, args, kwargs)
        )
        name = str(func)
        inputs = list(args)
        scatter = SCATTER.match(name)
        if name.startswith("aten.copy_") or scatter:
            inputs = inputs[1:]  # the destination is written, not read
        leaves = tree_leaves((inputs, {k: v for k, v in kwargs.items() if k != "out"}))
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        operands = {_storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}  # and `out=`
        ins = [self._tensor(t) for t in tensors]
        results = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        outs = [(tuple(t.shape), t.element_size()) for t in results]
        if scatter:  # an in-place scatter writes what it scatters, not its whole destination
            src = args[SCATTER_SOURCE[scatter.group(1)]]
            src = src if isinstance(src, torch.Tensor) else args[2]  # scatter_.value: one value per index
            outs = [(tuple(src.shape), args[0].element_size())]
        self.ops.append(
            {
                "op": name,
                "kind": kind,
                "path": self.modules.path,
                "phase": self.modules.phase,
                "segment": self.modules.segment,
                "ins": ins,
                "outs": outs,
                "rd": [self._id(t) for t in tensors],  # which storage each tensor lives in (`bench.gpu.fusion`)
                "wr": [self._id(t, fresh=_storage(t) not in operands) for t in results],
            }
        )
        return out


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _shape_only(func, args, kwargs):
    """A matmul / grouped matmul / attention kernel's outputs without its arithmetic: the op runs on meta
    tensors for its output shapes, strides and dtypes, and zeros of those stand in (`out=` buffers are returned as
    they are). The op sequence of the code is unchanged: no branch of it depends on these values (routing
    ties pick valid experts; the grouped-MM path's ops do not depend on the routing)."""
    dev = next(t.device for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
    margs, mkw = tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, (args, kwargs))
    res = func(*margs, **mkw)
    if "out" in kwargs:
        return kwargs["out"]

    def real(t):  # the meta kernel's strides too: the code after the op may branch on contiguity
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=dev).zero_()

    return tree_map(lambda t: real(t) if isinstance(t, torch.Tensor) else t, res)


def _param_roles(model: torch.nn.Module) -> tuple[dict[int, tuple[str, str]], int]:
    """storage pointer -> (name, role): "e" the tied embedding / LM head, "x" expert weights, "w" the rest."""
    head = model.get_output_embeddings().weight.untyped_storage().data_ptr()
    roles: dict[int, tuple[str, str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        ptr = p.untyped_storage().data_ptr()
        if ptr in roles:
            continue
        roles[ptr] = ("embed", "e") if ptr == head else (n, "x" if ".experts." in n else "w")
    return roles, head


def _part(path: str, phase: str, pre: str) -> str:
    if "self_attn" in path or "rotary_emb" in path:
        return "attention"
    if ".router" in path or ".experts" in path:
        return "moe"
    if re.search(r"\.mlp(\.|$)", path):
        return "mlp"
    if "self_conditioning" in path:
        return "selfcond"
    if "lm_head" in path:
        return "lm_head"
    if ".layers." in path or path.endswith("norm") or "embed" in path:
        return "other"
    return {"pre": pre, "body": "other", "head": "lm_head", "post": "sampler", "masks": "attention"}[phase]


def compact(
    ops: list[dict],
    layer_types: list[str],
    ctx_dims: set[int],
    top_k: int,
    rows: int,
    pre: str = "selfcond",
    mode: str = "model",
) -> list[dict]:
    """Raw ops -> records with a part, a layer type, a K/V-copy flag and a count (identical ops merged).

    K/V copies: kernels outside matmuls / attention reading a tensor whose slot axis (-2) is a cached length
    (repeat_kv, a gather of slot rows). `mode`: "model"
    (parts by module), "commit" (everything in the encoder is `encode`, the rest `cache`), "sampler"."""
    merged: Counter = Counter()
    for op in ops:
        m = re.search(r"layers\.(\d+)", op["path"])
        lt = layer_types[int(m.group(1))] if m else None
        part = _part(op["path"], op["phase"], pre)
        kvcopy = op["kind"] == "elt" and part != "moe" and any(len(s) >= 4 and s[-2] in ctx_dims for s, *_ in op["ins"])
        if mode == "sampler":
            part = "sampler"
        elif kvcopy and (mode == "commit" or "self_attn" not in op["path"] or op["op"].startswith("aten.cat")):
            part = "cache"  # cache maintenance: copies of cached K/V outside attention
        elif kvcopy:
            pass  # K/V copies inside attention (repeat_kv): attention's, counted as K/V copy bytes
        elif mode == "commit":
            part = "encode" if op["path"] else "cache"
        # tokens per batch row a grouped matmul runs (its pairs / top_k): the experts they touch
        pairs = op["ins"][0][0][0] if op["kind"] == "gmm" else op["outs"][0][0][0] if op["kind"] == "moe" else 0
        tokens = pairs / top_k / rows
        fused = (tuple(op["mem_in"]), tuple(op["mem_out"]), op["launch"]) if "launch" in op else None
        key = (
            op["op"],
            part,
            lt,
            op["kind"],
            kvcopy,
            tokens,
            tuple(op["ins"]),
            tuple(op["outs"]),
            fused,
        )
        merged[key] += 1
    return [
        {
            "op": k[0],
            "part": k[1],
            "lt": k[2],
            "kind": k[3],
            "kvcopy": k[4],
            "tokens_per_row": k[5],
            "ins": [list(x) for x in k[6]],
            "outs": [list(x) for x in k[7]],
            "count": n,
            **({} if k[8] is None else {"mem_in": list(k[8][0]), "mem_out": list(k[8][1]), "launch": k[8][2]}),
        }
        for k, n in merged.items()
    ]


@contextlib.contextmanager
def _in_phase(mods: _Modules, obj, attr: str, phase: str):
    """While it is patched, a call of obj.attr sets the phase (and restores the one before when it returns)."""
    original, own = getattr(obj, attr), attr in vars(obj)  # a module's function, or a method of a class

    @functools.wraps(original)
    def call(*a, **k):
        before, mods.phase = mods.phase, phase
        try:
            return original(*a, **k)
        finally:
            mods.phase = before

    setattr(obj, attr, call)
    try:
        yield
    finally:
        if own:
            setattr(obj, attr, original)
        else:
            delattr(obj, attr)


class Tracer:
    """Runs callables under FlopCounterMode + the op recorder and keeps the compacted records."""

    def __init__(
        self, root: torch.nn.Module, layer_types: list[str], ctx_dims: set[int], top_k: int, compute: bool = False
    ):
        self.root, self.layer_types, self.ctx_dims, self.top_k = root, layer_types, ctx_dims, top_k
        self.compute = compute
        self.params, _ = _param_roles(root)

    @torch.no_grad()
    def run(
        self,
        fn,
        rows: int,
        segment_module=None,
        segment: int | None = None,
        fused: bool = False,
        phases: tuple = (),
        **compact_kw,
    ) -> dict[str, Any]:
        """`fused`: the call is a compiled graph's function: mark what its fused kernels move (`bench.gpu.fusion`).
        `phases`: (object, attribute, phase) triples: calls of object.attribute run in that phase (code outside
        any module: the masks a graph builds, the sampler step after the LM head)."""
        t0 = time.perf_counter()
        mods = _Modules(self.root, segment_module)
        flop_counter = FlopCounterMode(display=False)
        rec = _Recorder(mods, self.params, self.compute)
        with mods, rec, flop_counter, contextlib.ExitStack() as stack:  # the counter sees each op first
            for obj, attr, phase in phases:
                stack.enter_context(_in_phase(mods, obj, attr, phase))
            fn()
        ops = rec.ops if segment is None else [o for o in rec.ops if o["segment"] >= segment]
        fusion = None
        if fused:
            fusion = totals(fuse(ops))  # at the twin's shapes, comparable with inductor's count of the same graph
        twin_mm = 0
        for o in rec.ops:
            if o["kind"] == "mm":
                mats = [s for s, *_ in o["ins"] if len(s) >= 2]
                a, b = mats[-2], mats[-1]
                twin_mm += 2 * _numel(a) * b[-1]
        records = compact(ops, self.layer_types, self.ctx_dims, self.top_k, rows, **compact_kw)
        pre = compact_kw.get("pre", "selfcond")
        embed = [
            [_part(o["path"], o["phase"], pre), _numel(o["outs"][0][0]) // o["outs"][0][0][-1]]
            for o in ops
            if o["kind"] == "mm" and any(r == "e" for *_, r, _ in o["ins"])
        ]
        return {
            "rows": rows,
            "records": records,
            "stats": {
                "aten_ops": len(ops),
                "kernels": sum(o["kind"] != "view" for o in ops),
                "embed_matmuls": len(embed),
                "embed_matmul_rows": embed,  # [part, rows covered] of each matmul with the tied embedding
                "flop_counter_total": flop_counter.get_total_flops(),  # all ops of the call (mm/bmm/addmm counted)
                "twin_mm_flops": twin_mm,  # the same matmuls by our formula (cross-check)
                **({"fused_at_twin": fusion} if fusion else {}),
                "seconds": time.perf_counter() - t0,
            },
        }


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
