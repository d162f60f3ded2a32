"""`localspec build-cuda`: llama-cpp-python rebuilt with CUDA from PyPI alone.

NVIDIA publishes the CUDA 13 toolchain as Python wheels (nvcc, cicc, ptxas, the runtime, cuBLAS;
they land in `site-packages/nvidia/cu13/`), so a machine with an NVIDIA driver but no system
toolkit, or a machine with no GPU at all (building for another), can compile llama.cpp's CUDA
backend. The wheels lack three things CMake expects of a toolkit, which a link folder supplies:
unversioned library names (`libcudart.so`, `libcublas.so`), and `libcuda.so`, the driver
library, which only the driver installs. A link needs no symbols from it, only its name
(`libcuda.so.1`, resolved at run time from the driver), so an empty library with that name
stands in, as the toolkit's own `stubs/libcuda.so` does. The libraries find the wheels' runtime
at run time through an rpath relative to themselves: `llama_cpp/lib/` and `nvidia/cu13/lib/`
are both in site-packages.

Nothing here imports llama.cpp: the command replaces it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from localspec.machine import NO_AMX_FLAGS, cpu_lists_amx, nvidia_smi
from localspec.paths import private_folder, write_private

# the wheels that hold nvcc and what it runs, the CUDA runtime and cuBLAS (CUDA 13)
TOOLCHAIN_WHEELS = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
    "nvidia-cublas",
)
# where the wheels put the toolkit, relative to site-packages
WHEEL_ROOT = Path("nvidia", "cu13")
# from llama_cpp/lib/ (where the built libraries go) to the wheels' libraries
_RPATH = r"\$ORIGIN/../../nvidia/cu13/lib"
_UNVERSIONED = {
    "libcudart.so": "libcudart.so.13",
    "libcublas.so": "libcublas.so.13",
    "libcublasLt.so": "libcublasLt.so.13",
}


@dataclass(frozen=True)
class Toolchain:
    """A CUDA compiler this machine has: from PyPI wheels, or a system toolkit."""

    source: str  # "pypi" or "system"
    nvcc: Path


def pypi_toolchain(paths: list[str] | None = None) -> Path | None:
    """The wheels' toolkit folder (`.../site-packages/nvidia/cu13`) on this interpreter's path."""
    for entry in sys.path if paths is None else paths:
        root = Path(entry or ".") / WHEEL_ROOT
        if (root / "bin" / "nvcc").is_file():
            return root
    return None


def system_nvcc() -> Path | None:
    """A system toolkit's nvcc: on PATH, else CUDA's default install folder."""
    found = shutil.which("nvcc")
    for candidate in (found, "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def toolchains() -> list[Toolchain]:
    """Every CUDA compiler found, the wheels' first (what `build-cuda` uses)."""
    found = []
    root = pypi_toolchain()
    if root is not None:
        found.append(Toolchain("pypi", root / "bin" / "nvcc"))
    nvcc = system_nvcc()
    if nvcc is not None:
        found.append(Toolchain("system", nvcc))
    return found


def gpu_architecture() -> str | None:
    """This machine's first GPU as CMake names its architecture ("8.6" -> "86"), if any."""
    caps = nvidia_smi("--query-gpu=compute_cap", "--format=csv,noheader")
    return caps[0].strip().replace(".", "") if caps and caps[0].strip() else None


def driver_functions(root: Path) -> list[str]:
    """Every function the driver API (`cuda.h`) declares, by the names the preprocessor leaves
    (`cuMemGetInfo` is `cuMemGetInfo_v2`): what a stand-in `libcuda.so` must define."""
    cc = os.environ.get("CC", "cc")
    header = root / "include" / "cuda.h"
    done = subprocess.run(
        [cc, "-E", "-P", f"-I{root / 'include'}", "-x", "c", str(header)],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(set(re.findall(r"\bCUresult\s+(cu[A-Z]\w*)\s*\(", done.stdout)))


def make_link_folder(root: Path, into: Path) -> Path:
    """A toolkit-shaped folder over the wheels' `root`: its `bin`, `include` and `nvvm`, its
    libraries under their own and their unversioned names, and a stand-in `libcuda.so`.

    The stand-in defines every driver function (as the toolkit's `stubs/libcuda.so` does):
    a linker that drops libraries nothing needs (`--as-needed`) would otherwise leave
    `libcuda.so.1` out of libggml-cuda's dependencies, and its `cuMemCreate` unresolved at load.
    """
    private_folder(into)
    for name in ("bin", "include", "nvvm"):
        (into / name).symlink_to(root / name)
    lib = private_folder(into / "lib")
    for library in (root / "lib").iterdir():
        (lib / library.name).symlink_to(library)
    for name, versioned in _UNVERSIONED.items():
        (lib / name).symlink_to(root / "lib" / versioned)
    stub = into / "libcuda_stub.c"
    lines = [
        f"int {name}(void) {{ return 999; /* CUDA_ERROR_UNKNOWN */ }}"
        for name in driver_functions(root)
    ]
    header = "/* stands in for the driver's libcuda.so.1 at link time */\n"
    write_private(stub, header + "\n".join(lines), own_folder=False)
    cc = os.environ.get("CC", "cc")
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(lib / "libcuda.so"),
            str(stub),
        ],
        check=True,
    )
    return into


def cmake_args(
    architectures: list[str], toolkit: Path | None, *, portable: bool = False
) -> list[str]:
    """CMake's options: CUDA on for these architectures (machine code only, `-real`: each GPU
    named runs it without compiling PTX at start), and, for the wheels, the link folder and the
    relative rpath. llava/mtmd is left out (localspec does not use it; it doubles the build).
    `portable`: for another machine, whose CPU may lack this one's instructions."""
    archs = ";".join(a if "-" in a else f"{a}-real" for a in architectures)
    args = [
        "-DGGML_CUDA=on",
        f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
        "-DLLAVA_BUILD=off",
        "-DLLAMA_OPENSSL=off",
    ]
    if portable:  # a wheel for another machine: the CPU part for any x86-64, not this one
        args.append("-DGGML_NATIVE=off")
    if toolkit is not None:
        args += [
            f"-DCUDAToolkit_ROOT={toolkit}",
            f"-DCMAKE_CUDA_COMPILER={toolkit / 'bin' / 'nvcc'}",
            f"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath,{_RPATH}",
        ]
    return args


def build_environment(args: list[str], jobs: int) -> dict[str, str]:
    """The environment pip builds in: CMAKE_ARGS (shell-quoted: scikit-build-core splits it
    like a shell), the build's parallelism, and on a CPU that lists AMX the flags of .ci/run."""
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(shlex.quote(a) for a in args)
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    if cpu_lists_amx():
        for name in ("CFLAGS", "CXXFLAGS"):
            env[name] = f"{env.get(name, '')} {NO_AMX_FLAGS}".strip()
    return env


def pip_commands(version: str, wheel_dir: Path | None) -> list[list[str]]:
    """The toolchain wheels into this environment (the built library needs their runtime), then
    llama-cpp-python compiled from source: installed in place, or written to `wheel_dir`."""
    pip = [sys.executable, "-m", "pip"]
    wheels = [*pip, "install", *TOOLCHAIN_WHEELS]
    source = f"llama-cpp-python=={version}"
    if wheel_dir is None:
        build = [
            *pip,
            "install",
            "--force-reinstall",
            "--no-deps",
            "--no-cache-dir",
            "--no-binary",
            "llama-cpp-python",
            source,
        ]
    else:
        build = [
            *pip,
            "wheel",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            "--no-cache-dir",
            "-w",
            str(wheel_dir),
            source,
        ]
    return [wheels, build]


def _installed_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return _pinned_version()


def _pinned_version() -> str:
    for requirement in metadata.requires("localspec") or []:
        if requirement.startswith("llama-cpp-python=="):
            return requirement.split("==", 1)[1].split(";", 1)[0].strip()
    raise SystemExit("localspec's llama-cpp-python pin is not readable: reinstall localspec")


def build_cuda_command(args: argparse.Namespace) -> int:
    architectures = [a for part in args.arch for a in part.split(",") if a] if args.arch else []
    if not architectures:
        detected = gpu_architecture()
        if detected is None:
            print(
                "no NVIDIA GPU found to build for: name its architecture, e.g. "
                "--arch 86 (RTX 30xx), 89 (RTX 40xx), 90 (H100), 120 (RTX 50xx)",
                file=sys.stderr,
            )
            return 2
        architectures = [detected]
    version = args.version or _installed_version()
    wheels_cmd, build_cmd = pip_commands(version, args.wheel_dir)
    if args.dry_run:
        print(shlex.join(wheels_cmd))
        toolkit = Path("<site-packages>/nvidia/cu13 links")
        options = cmake_args(architectures, toolkit, portable=args.wheel_dir is not None)
        print(f"CMAKE_ARGS={shlex.quote(' '.join(options))} {shlex.join(build_cmd)}")
        return 0
    started = time.monotonic()
    if subprocess.run(wheels_cmd, check=False).returncode != 0:
        print(
            f"pip could not install NVIDIA's CUDA wheels ({', '.join(TOOLCHAIN_WHEELS)}): "
            "see its message above",
            file=sys.stderr,
        )
        return 1
    root = pypi_toolchain()
    if root is None:
        print(
            f"the CUDA wheels installed, but {WHEEL_ROOT}/bin/nvcc is not on this "
            "interpreter's path",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="localspec-cuda-") as folder:
        try:
            toolkit = make_link_folder(root, Path(folder) / "cuda")
        except (OSError, subprocess.CalledProcessError) as exc:
            print(
                f"cannot prepare the CUDA wheels for CMake ({exc}): the build needs a C and "
                "C++ compiler (cc; gcc 12 or 13), e.g. `apt install build-essential`",
                file=sys.stderr,
            )
            return 1
        env = build_environment(
            cmake_args(architectures, toolkit, portable=args.wheel_dir is not None),
            args.jobs or os.cpu_count() or 1,
        )
        print(
            f"building llama-cpp-python {version} for CUDA {', '.join(architectures)} "
            f"(about 25 min on 2 cores for one architecture; CMAKE_ARGS={env['CMAKE_ARGS']})",
            file=sys.stderr,
        )
        done = subprocess.run(build_cmd, env=env, check=False)
    minutes = (time.monotonic() - started) / 60
    if done.returncode != 0:
        print(f"the build failed after {minutes:.0f} min (pip's output above)", file=sys.stderr)
        return 1
    after = (
        f"the wheel is in {args.wheel_dir}"
        if args.wheel_dir
        else "`localspec doctor` should now say GPU offload: yes"
    )
    print(f"built in {minutes:.0f} min; {after}", file=sys.stderr)
    return 0
