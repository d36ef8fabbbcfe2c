"""Compile the repository's Triton kernels for a GPU ahead of time, on any machine: no GPU and no driver needed.

Why: the fused MoE experts (`models.kernels.fused_moe`) and the fused sampler draw (`samplers.triton_draw`) run on CUDA
only, and the tests run them in Triton's interpreter, which checks their arithmetic but never compiles them. A
kernel that the compiler rejects for Hopper, or whose tiles need more shared memory or registers than an SM has,
would first show on a lent GPU, inside its few minutes. Here each launch the code makes at the released model's
shapes is recorded (the real launcher runs on `meta` tensors, and its kernel call is captured instead of run),
then compiled by Triton to a cubin for the target (Triton's bundled `ptxas`), and its resource use read with the
bundled `cuobjdump`: registers per thread, local memory (spills), shared memory.

The compile mirrors how Triton's launcher specialises the call: constexpr arguments, `num_warps` / `num_stages`,
integer arguments equal to 1 (constants) and the 16-divisibility hints (`tt.divisibility`) of integers that are
multiples of 16 and of pointers, whose tensors here start their storage (the caching allocator's blocks are
512-byte aligned). The hints decide whether loads vectorise, so they move the register counts.

    python -m bench.gpu.kernel_build                  # sm_90 (H100 / H200): every launch at the released shapes
    python -m bench.gpu.kernel_build --arch 80 --json /tmp/kernels.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import torch

from bench.cpu.released_model import FULL_TEXT

# an SM's limits (Hopper and Ampere): a block's shared memory (opt-in maximum) and a thread's registers
MAX_SHARED_BYTES = {90: 232_448, 80: 166_912}
MAX_REGISTERS = 255
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas")
DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
}


@dataclass
class Launch:
    """One kernel call as the code makes it: the kernel, its arguments and launch options (meta tensors)."""

    name: str
    kernel: Any
    args: tuple
    kwargs: dict


@dataclass
class Built:
    name: str
    kernel: str
    arch: int
    constexprs: dict
    options: dict
    registers: int
    local_bytes: int  # spills and stack (0: everything stays in registers)
    shared_bytes: int  # static + dynamic shared memory of one block
    compile_s: float  # about 0 when Triton's cache (TRITON_CACHE_DIR) held the same kernel
    mma: str  # the tensor-core instructions of tl.dot in the PTX: "wgmma" (Hopper), "mma" (sm_80 style) or "-"
    fits: bool  # registers and shared memory within one SM's limits


class _Recorder:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **kwargs)` records the call instead of running it."""

    def __init__(self, kernel, name: str, into: list[Launch]):
        self.kernel, self.name, self.into = kernel, name, into

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.into.append(Launch(self.name, self.kernel, args, kwargs))

        return call


def _declared(kernel) -> set[str]:
    """The kernel's own `tl.constexpr` parameters."""
    return {p.name for p in kernel.params if p.is_constexpr}


def released_launches(batches: tuple[int, ...] = (1, 32)) -> list[Launch]:
    """Every launch of the two kernels for one layer's experts and one step's draw at the released shapes."""
    from models.kernels import fused_moe
    from samplers import triton_draw

    if fused_moe.triton is None:
        raise RuntimeError("bench.gpu.kernel_build needs triton")
    if fused_moe._INTERPRETED or triton_draw._KERNEL_INTERPRETED:
        raise RuntimeError("bench.gpu.kernel_build compiles the kernels: run it without TRITON_INTERPRET=1")
    t = FULL_TEXT
    h, i, e, k = t["hidden_size"], t["moe_intermediate_size"], t["num_experts"], t["top_k_experts"]
    canvas, vocab = 256, t["vocab_size"]
    meta = {"device": "meta"}
    launches: list[Launch] = []
    moe = _Recorder(fused_moe._grouped_kernel, "moe", launches)
    # the launcher's CUDA check is skipped: its tensors here are meta
    with patch.object(fused_moe, "_grouped_kernel", moe), patch.object(fused_moe, "_check", lambda x: None):
        for b in batches:
            pairs = b * canvas * k
            bm = fused_moe.block_rows(pairs, e)
            order = torch.empty(pairs, dtype=torch.int64, **meta)
            table = torch.empty(3, -(-pairs // bm) + e, dtype=torch.int32, **meta)
            x = torch.empty(b * canvas, h, dtype=torch.bfloat16, **meta)
            gate_up = torch.empty(e, 2 * i, h, dtype=torch.bfloat16, **meta)
            down = torch.empty(e, h, i, dtype=torch.bfloat16, **meta)
            act = torch.empty(pairs, i, dtype=torch.bfloat16, **meta)
            weights = torch.empty(pairs, dtype=torch.float32, **meta)
            n = len(launches)
            fused_moe._launch(x, gate_up, None, act, order, table, k, bm, gate_up=True)
            out = torch.empty(pairs, h, dtype=torch.bfloat16, **meta)
            fused_moe._launch(act, down, weights, out, order, table, 1, bm, gate_up=False)
            for launch, part in zip(launches[n:], ("gate_up", "down")):
                launch.name = f"moe_{part} B={b} ({pairs} pairs, BM={bm})"
    with patch.object(triton_draw, "_fused_draw_kernel", _Recorder(triton_draw._fused_draw_kernel, "draw", launches)):
        for b in batches:
            rows = b * canvas
            raw = torch.empty(rows, vocab, dtype=torch.bfloat16, **meta)
            temperature, u = torch.ones(rows, **meta), torch.empty(rows, dtype=torch.float64, **meta)
            for out in (None, torch.empty(rows, vocab, dtype=torch.bfloat16, **meta)):
                triton_draw.fused_draw(raw, temperature, u, 30.0, out)
                launches[-1].name = f"draw B={b} ({rows} rows{', writes processed' if out is not None else ''})"
    return launches


def _signature(launch: Launch) -> tuple[dict, dict, dict, list]:
    """Triton's (signature, constexprs, options, 16-divisible argument names) for the call, as its launcher
    specialises it."""
    names = launch.kernel.arg_names
    params = dict(zip(names, launch.args))
    params.update({n: v for n, v in launch.kwargs.items() if n not in LAUNCH_OPTIONS})
    options = {n: v for n, v in launch.kwargs.items() if n in LAUNCH_OPTIONS}
    declared = _declared(launch.kernel)
    signature, constexprs, divisible = {}, {}, []
    for n in names:
        v = params[n]
        if n not in declared and (
            v.storage_offset() == 0
            if isinstance(v, torch.Tensor)
            else isinstance(v, int) and not isinstance(v, bool) and v % 16 == 0
        ):
            divisible.append(n)
        if n in declared or v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 1):
            signature[n], constexprs[n] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[n] = "*" + DTYPES[v.dtype]
        elif isinstance(v, bool):
            signature[n] = "i1"
        elif isinstance(v, int):
            signature[n] = "i32" if -(2**31) <= v < 2**31 else "i64"
        elif isinstance(v, float):
            signature[n] = "fp32"
        else:
            raise TypeError(f"{launch.name}: argument {n} of type {type(v).__name__}")
    return signature, constexprs, options, divisible


def _resources(cubin: bytes) -> dict[str, int]:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        cmd = [str(tool), "--dump-resource-usage", str(path)]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text))
    return {k: int(v) for k, v in found.items()}


def build(launch: Launch, arch: int = 90) -> Built:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    signature, constexprs, options, divisible = _signature(launch)
    names = launch.kernel.arg_names
    attrs = {(names.index(n),): CUDABackend.parse_attr("D") for n in divisible}
    src = ASTSource(launch.kernel, signature, {(names.index(n),): v for n, v in constexprs.items()}, attrs)
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    seconds = time.perf_counter() - t0
    use = _resources(compiled.asm["cubin"])
    ptx = compiled.asm["ptx"]
    shared = use.get("SHARED", 0) + int(compiled.metadata.shared)
    registers = use.get("REG", 0)
    declared = _declared(launch.kernel)
    return Built(
        name=launch.name,
        kernel=launch.kernel.fn.__name__,
        arch=arch,
        constexprs={n: v for n, v in constexprs.items() if n in declared},
        options=options,
        registers=registers,
        local_bytes=use.get("LOCAL", 0) + use.get("STACK", 0),
        shared_bytes=shared,
        compile_s=seconds,
        mma="wgmma" if "wgmma.mma_async" in ptx else "mma" if "mma.sync" in ptx else "-",
        fits=registers <= MAX_REGISTERS and shared <= MAX_SHARED_BYTES.get(arch, MAX_SHARED_BYTES[80]),
    )


def run(arch: int = 90, batches: tuple[int, ...] = (1, 32)) -> dict[str, Any]:
    import triton

    rows = [asdict(build(launch, arch)) for launch in released_launches(batches)]
    versions = {"triton": triton.__version__, "torch": torch.__version__}
    return {"bench": "kernel_build", "arch": arch, **versions, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10: 90 (H100 / H200), 80 (A100)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        sys.exit("bench.gpu.kernel_build compiles the kernels: unset TRITON_INTERPRET")
    res = run(a.arch, tuple(a.batches))
    print(f"Triton {res['triton']} kernels compiled for sm_{a.arch} (cubin; resources from cuobjdump), no GPU used")
    head = f"{'regs':>5} {'local B':>8} {'shared KB':>10} {'mma':>6} {'fits':>5} {'compile s':>10}"
    print(f"{'launch':<48} {head}  options")
    for r in res["rows"]:
        opts = ", ".join(f"{k}={v}" for k, v in {**r["constexprs"], **r["options"]}.items())
        print(
            f"{r['name']:<48} {r['registers']:>5} {r['local_bytes']:>8} {r['shared_bytes'] / 1024:>10.1f} "
            f"{r['mma']:>6} {'yes' if r['fits'] else 'NO':>5} {r['compile_s']:>10.1f}  {opts}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
