"""`localspec build-cuda`: the link folder over NVIDIA's wheels, CMake's options, the commands.

The compile itself takes the better part of an hour on a 2-core machine (docs/gpu.md gives the
measured run); here the parts it is made of run for real: the stand-in `libcuda.so` is compiled
and read back, the folder is built over a wheel-shaped tree, and the command runs as a process.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from localspec.cli.build_cuda import (
    TOOLCHAIN_WHEELS,
    build_environment,
    cmake_args,
    driver_functions,
    make_link_folder,
    pip_commands,
    pypi_toolchain,
)
from tests.server.conftest import LOCALSPEC

# the shape of the wheels' cuda.h: versioned names behind #defines, CUDAAPI, a typedef
CUDA_H = """#include <stddef.h>
typedef int CUresult;
#define CUDAAPI
#define cuMemGetInfo cuMemGetInfo_v2
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total);
CUresult CUDAAPI cuMemCreate(void *handle, size_t size, const void *prop,
                             unsigned long long flags);
typedef CUresult (CUDAAPI *PFN_cuInit)(unsigned int Flags);
"""


def wheel_tree(site: Path) -> Path:
    """What the CUDA 13 wheels lay out under site-packages (the files' contents do not matter)."""
    root = site / "nvidia" / "cu13"
    for folder in ("bin", "include", "nvvm/bin", "lib"):
        (root / folder).mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "include" / "cuda.h").write_text(CUDA_H)
    for name in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcudart_static.a"):
        (root / "lib" / name).write_bytes(b"\x7fELF")
    return root


def test_the_wheels_toolkit_is_found_on_the_path(tmp_path: Path) -> None:
    root = wheel_tree(tmp_path / "site-packages")
    assert pypi_toolchain([str(tmp_path / "elsewhere"), str(tmp_path / "site-packages")]) == root
    assert pypi_toolchain([str(tmp_path / "elsewhere")]) is None


def test_the_link_folder_gives_cmake_a_toolkit(tmp_path: Path) -> None:
    root = wheel_tree(tmp_path / "site-packages")
    folder = make_link_folder(root, tmp_path / "cuda")
    assert (folder / "bin" / "nvcc").resolve() == (root / "bin" / "nvcc").resolve()
    lib = folder / "lib"
    for unversioned, versioned in (
        ("libcudart.so", "libcudart.so.13"),
        ("libcublas.so", "libcublas.so.13"),
        ("libcublasLt.so", "libcublasLt.so.13"),
    ):
        assert (lib / unversioned).resolve() == (root / "lib" / versioned).resolve()
    assert (lib / "libcudart_static.a").resolve() == (root / "lib" / "libcudart_static.a")
    # the stand-in driver library: a shared object with the driver's soname that defines
    # every function cuda.h declares, by its versioned name (a linker with --as-needed keeps
    # it only if it defines what libggml-cuda calls)
    assert driver_functions(root) == ["cuInit", "cuMemCreate", "cuMemGetInfo_v2"]
    stub = ctypes.CDLL(str(lib / "libcuda.so"))
    assert stub.cuMemGetInfo_v2() == stub.cuMemCreate() == 999
    assert b"libcuda.so.1\x00" in (lib / "libcuda.so").read_bytes()
    dynamic = subprocess.run(
        ["readelf", "-d", str(lib / "libcuda.so")], capture_output=True, text=True, check=False
    )
    if dynamic.returncode == 0:
        assert "Library soname: [libcuda.so.1]" in dynamic.stdout


def test_cmake_options_name_machine_code_for_each_architecture(tmp_path: Path) -> None:
    args = cmake_args(["86", "89", "90a-real"], tmp_path / "cuda")
    assert "-DGGML_CUDA=on" in args
    assert "-DCMAKE_CUDA_ARCHITECTURES=86-real;89-real;90a-real" in args
    assert f"-DCUDAToolkit_ROOT={tmp_path / 'cuda'}" in args
    assert f"-DCMAKE_CUDA_COMPILER={tmp_path / 'cuda' / 'bin' / 'nvcc'}" in args
    assert "-DGGML_NATIVE=off" not in args  # built here for here: this CPU's instructions
    assert "-DGGML_NATIVE=off" in cmake_args(["90"], None, portable=True)  # for elsewhere
    system = cmake_args(["86"], None)  # a system toolkit needs no folder and no rpath
    assert not [a for a in system if "CUDAToolkit_ROOT" in a or "rpath" in a]


def test_cmake_args_survive_the_split_scikit_build_core_makes(tmp_path: Path) -> None:
    """scikit-build-core splits CMAKE_ARGS like a shell: the rpath's `\\$ORIGIN` (escaped for
    the shell ninja runs the linker in) and a folder with a space come through whole."""
    args = cmake_args(["90"], tmp_path / "a folder" / "cuda")
    env = build_environment(args, 3)
    assert shlex.split(env["CMAKE_ARGS"]) == args
    assert env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3"
    (rpath,) = [a for a in args if "rpath" in a]
    assert rpath == r"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,\$ORIGIN/../../nvidia/cu13/lib"


def test_pip_compiles_from_source_into_this_environment(tmp_path: Path) -> None:
    wheels, build = pip_commands("0.3.36", None)
    assert wheels[-len(TOOLCHAIN_WHEELS) :] == list(TOOLCHAIN_WHEELS)
    assert build[-1] == "llama-cpp-python==0.3.36"
    assert {"--force-reinstall", "--no-deps", "--no-cache-dir"} <= set(build)
    assert build[build.index("--no-binary") + 1] == "llama-cpp-python"  # never a prebuilt wheel
    _, wheel = pip_commands("0.3.36", tmp_path)
    assert wheel[wheel.index("-w") + 1] == str(tmp_path)


def run_command(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, "build-cuda", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
        check=False,
    )


def test_dry_run_prints_what_it_would_run() -> None:
    done = run_command(
        "--arch", "86,89", "--version", "0.3.36", "--dry-run", path=os.environ["PATH"]
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.endswith("pip install " + " ".join(TOOLCHAIN_WHEELS))
    assert "-DCMAKE_CUDA_ARCHITECTURES=86-real;89-real" in second
    assert second.endswith("llama-cpp-python==0.3.36")


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has an NVIDIA GPU")
def test_without_a_gpu_it_asks_which_one_to_build_for(tmp_path: Path) -> None:
    done = run_command("--dry-run", path=str(Path(LOCALSPEC).parent))  # no nvidia-smi on it
    assert done.returncode == 2
    assert "--arch 86 (RTX 30xx)" in done.stderr
    assert done.stdout == ""
