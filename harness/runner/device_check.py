"""`model.device: cuda` checked before any download or model load, without importing torch (issue 45).

Without it a 16B hub model downloads and loads for minutes, then fails with torch's "Torch not compiled with CUDA
enabled". Two facts decide it in milliseconds: whether the installed torch is a CUDA build (its `torch/version.py`,
read as text: importing torch costs seconds) and how many devices the NVIDIA driver reports (`cuDeviceGetCount`
through `libcuda`, which honours `CUDA_VISIBLE_DEVICES`).
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path

from omegaconf import DictConfig

_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(None|'[^']*'|\"[^\"]*\")", re.MULTILINE)


def torch_cuda_build() -> str | None:
    """The CUDA version the installed torch was built for ("12.8"), None for a CPU build or no torch."""
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    found = _CUDA_LINE.search(version.read_text()) if version.is_file() else None
    return None if found is None or found.group(1) == "None" else found.group(1).strip("'\"")


def cuda_device_count() -> int:
    """Devices the NVIDIA driver lets this process see (0: no driver, no device, or `CUDA_VISIBLE_DEVICES=""`)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def check_device(model: DictConfig) -> None:
    """A model on `cuda[:k]` needs a CUDA build of torch and a device k the driver reports; fail naming
    `model.device` otherwise (a `device_map` spreads the model itself and is not checked here)."""
    device = str(model.get("device") or "cpu")
    if not device.startswith("cuda"):
        return
    build = torch_cuda_build()
    if build is None:
        raise ValueError(
            f"model.device={device}: the installed torch is a CPU build (no CUDA); install a CUDA build of torch, "
            "or run on the CPU with model.device=cpu"
        )
    count = cuda_device_count()
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        seen = (
            f"{count} CUDA device(s)"
            if count
            else "no CUDA device (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them)"
        )
        raise ValueError(f"model.device={device}: this machine shows {seen}; torch is built for CUDA {build}")
