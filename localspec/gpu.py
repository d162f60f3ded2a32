"""Which GPU this machine has, as far as cheap checks tell, and the llama.cpp build it needs.

`pip install` builds llama.cpp for the CPU everywhere but on Apple Silicon, and a CPU build
runs on a machine with an idle RTX card without a word: `--gpu-layers` is silently ignored.
`localspec doctor` says so with the exact rebuild command; `chat`, `serve` and `complete` say
it once per llama-cpp-python version and GPU kind (a marker file remembers it was shown).

Detection is ordered by cost: device files, `/sys` and PATH lookups only, on every command;
`nvidia-smi -L` (which can take a second while the driver wakes) only when the answer is not
remembered yet, and by `doctor`.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from localspec.errors import LocalspecError
from localspec.llama.backend import build_info
from localspec.machine import NO_AMX_FLAGS, cpu_lists_amx, nvidia_smi
from localspec.paths import open_private, private_folder, state_dir

_log = logging.getLogger(__name__)

GpuKind = Literal["cuda", "rocm", "vulkan", "metal"]

_CMAKE_ARGS: dict[GpuKind, str] = {
    "cuda": "-DGGML_CUDA=on",
    "rocm": "-DGGML_HIP=on",
    "vulkan": "-DGGML_VULKAN=on",
    "metal": "-DGGML_METAL=on",
}
# what the build needs, and the command that shows it is installed
_NEEDS: dict[GpuKind, str] = {
    "cuda": "the CUDA toolkit: nvcc --version",
    "rocm": "ROCm's HIP compiler: hipcc --version",
    "vulkan": "the Vulkan SDK: glslc --version",
    "metal": "Xcode's command-line tools: xcode-select -p",
}
# PCI vendor ids in /sys/class/drm/renderD*/device/vendor: GPUs that Vulkan drives well
_VULKAN_VENDORS = {"0x1002": "AMD GPU", "0x8086": "Intel GPU"}


@dataclass(frozen=True)
class Gpu:
    """A GPU this machine has: the llama.cpp backend for it and what showed it."""

    kind: GpuKind
    name: str


def _nvidia_devices() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))


def _drm_vendors() -> list[str]:
    vendors = []
    for vendor in sorted(Path("/sys/class/drm").glob("renderD*/device/vendor")):
        try:
            vendors.append(vendor.read_text().strip())
        except OSError:
            continue
    return vendors


def _candidate() -> GpuKind | None:
    """The GPU kind that device files and PATH suggest, without running anything."""
    if platform.system() == "Darwin":
        return "metal" if platform.machine() == "arm64" else None
    if shutil.which("nvidia-smi") or _nvidia_devices():
        return "cuda"
    vendors = _drm_vendors()
    has_rocm = shutil.which("rocminfo") or shutil.which("hipcc")
    if Path("/dev/kfd").exists() and has_rocm:
        return "rocm"
    if any(v in _VULKAN_VENDORS for v in vendors):
        return "vulkan"
    return None


def _nvidia_name() -> str | None:
    """The first GPU `nvidia-smi -L` lists ("GPU 0: NVIDIA GeForce RTX 4090 (UUID: ...)")."""
    for line in nvidia_smi("-L"):
        if line.startswith("GPU ") and ": " in line:
            return line.split(": ", 1)[1].split(" (UUID", 1)[0].strip()
    return None


def detect_gpu() -> Gpu | None:
    """The GPU this machine has, confirmed where a cheap tool can (`nvidia-smi -L`).

    An `nvidia-smi` that lists no GPU (a driver without a card, a container without the
    device) counts only if `/dev/nvidia0` exists.
    """
    kind = _candidate()
    if kind == "cuda":
        name = _nvidia_name()
        devices = _nvidia_devices()
        if name is None and not devices:
            return None
        return Gpu("cuda", name or f"NVIDIA GPU ({devices[0]})")
    if kind == "metal":
        return Gpu("metal", "Apple Silicon")
    if kind == "rocm":
        return Gpu("rocm", "AMD GPU (ROCm)")
    if kind == "vulkan":
        names = [_VULKAN_VENDORS[v] for v in _drm_vendors() if v in _VULKAN_VENDORS]
        return Gpu("vulkan", names[0])
    return None


def rebuild_command(kind: GpuKind, version: str) -> str:
    """The pip command of docs/gpu.md that rebuilds this llama-cpp-python version for `kind`.

    `--no-cache-dir` keeps pip from reusing the CPU wheel it built before; `--no-deps` keeps it
    from reinstalling numpy and the rest.
    """
    return (
        f'CMAKE_ARGS="{_CMAKE_ARGS[kind]}" pip install --force-reinstall --no-deps '
        f"--no-cache-dir llama-cpp-python=={version}"
    )


def advice(gpu: Gpu, version: str) -> str:
    """One line: the GPU is idle under a CPU-only build, and the command that fixes it here.

    On a CPU that lists AMX the flags of .ci/run come first: a GPU build compiles llama.cpp's
    CPU backend too, which would crash there like the CPU build (see docs/gpu.md).
    """
    flags = f'CFLAGS="{NO_AMX_FLAGS}" CXXFLAGS="{NO_AMX_FLAGS}" ' if cpu_lists_amx() else ""
    without_toolkit = "; or, without a toolkit: localspec build-cuda" if gpu.kind == "cuda" else ""
    return (
        f"{gpu.name} found, but llama-cpp-python {version} was built for the CPU only, so it "
        f"is idle; rebuild it (needs {_NEEDS[gpu.kind]}) with "
        f"{flags}{rebuild_command(gpu.kind, version)}{without_toolkit}"
    )


def _remember(marker: Path) -> None:
    """Create the marker 0600 in a 0700 folder; a read-only home only means saying it again."""
    try:
        private_folder(marker.parent)
        os.close(open_private(marker, append=True))
    except (OSError, LocalspecError) as exc:
        _log.debug("cannot remember the GPU notice in %s: %s", marker, exc)


def gpu_notice_once(say: Callable[[str], None]) -> None:
    """Tell the user once that their GPU is idle under a CPU-only llama.cpp build.

    Once per llama-cpp-python version and GPU kind: a rebuild (a new version) or another GPU
    earns a new notice. Where a check finds no GPU after all, that is remembered too, so the
    `nvidia-smi` run is not repeated on every command.
    """
    info = build_info()
    if info.gpu_offload:
        return
    kind = _candidate()
    if kind is None:
        return
    marker = state_dir() / "notices" / f"cpu-build-{info.llama_cpp_python}-{kind}"
    if marker.exists():
        return
    gpu = detect_gpu()
    _remember(marker)
    if gpu is not None:
        say(advice(gpu, info.llama_cpp_python))
