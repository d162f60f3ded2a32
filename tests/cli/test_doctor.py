"""`doctor` and the one-time notice catch a CPU-only llama.cpp build on a machine with a GPU.

This suite runs on a CPU build; an NVIDIA GPU is faked by an `nvidia-smi` script first on
PATH, which is all the detection runs. The real `localspec` command runs as a subprocess with
the test's isolated user folders (the marker of a notice shown lives in the state folder).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from localspec.gpu import GpuKind, detect_gpu, rebuild_command
from localspec.llama.backend import build_info
from tests.server.conftest import LOCALSPEC

ROOT = Path(__file__).resolve().parents[2]
GPU_LINE = "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-5f7c2a1e-0b3d-4c8e-9a61-2d4b7e9f0c13)"

pytestmark = pytest.mark.skipif(
    build_info().gpu_offload, reason="these tests are for a CPU-only llama.cpp build"
)


def cuda_command() -> str:
    return (
        'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-deps --no-cache-dir '
        f"llama-cpp-python=={build_info().llama_cpp_python}"
    )


def fake_nvidia_smi(folder: Path, script: str) -> dict[str, str]:
    """An environment whose PATH finds an `nvidia-smi` running `script` first."""
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{script}\n")
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def nvidia(tmp_path: Path) -> dict[str, str]:
    return fake_nvidia_smi(tmp_path / "bin", f'[ "$1" = -L ] && echo "{GPU_LINE}"')


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_doctor_gives_the_cuda_rebuild_command_in_one_line(nvidia: dict[str, str]) -> None:
    result = run("doctor", env=nvidia)
    assert result.returncode == 0, result.stderr
    advice = [line for line in result.stdout.splitlines() if "pip install" in line]
    assert len(advice) == 1
    assert "NVIDIA GeForce RTX 4090" in advice[0]
    assert "built for the CPU only" in advice[0]
    assert f"with {cuda_command()}; or, without a toolkit: localspec build-cuda" in advice[0]
    assert "CUDA compilers: " in result.stdout  # which route this machine has, if any

    report = json.loads(run("doctor", "--json", env=nvidia).stdout)
    assert report["gpu"] == {"kind": "cuda", "name": "NVIDIA GeForce RTX 4090"}
    assert report["gpu_advice"] == advice[0]
    assert report["gpu_offload"] is False
    assert report["gpu_offload_report"] is None  # a CPU build offloads nothing
    assert isinstance(report["cuda_compilers"], list)


@pytest.mark.skipif(detect_gpu() is not None, reason="this machine has a GPU of its own")
def test_no_gpu_no_advice(tmp_path: Path) -> None:
    broken = fake_nvidia_smi(tmp_path / "bin", 'echo "NVIDIA-SMI has failed"; exit 9')
    for env in (None, broken):  # no nvidia-smi; one that finds no GPU (and no /dev/nvidia0)
        result = run("doctor", env=env)
        assert result.returncode == 0, result.stderr
        assert "pip install" not in result.stdout
        report = json.loads(run("doctor", "--json", env=env).stdout)
        assert report["gpu"] is None
        assert report["gpu_advice"] is None


def test_complete_says_it_once(
    nvidia: dict[str, str], tiny_target: Path, isolated_user_dirs: Path
) -> None:
    args = ("complete", "--target", tiny_target, "--no-server", "--raw", "--max-tokens", "4", "hi")
    first, second = run(*args, env=nvidia), run(*args, env=nvidia)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stderr.count(cuda_command()) == 1
    assert "pip install" not in second.stderr
    assert first.stdout == second.stdout

    (marker,) = (isolated_user_dirs / "state" / "localspec" / "notices").iterdir()
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert stat.S_IMODE(marker.parent.stat().st_mode) == 0o700
    assert build_info().llama_cpp_python in marker.name
    assert marker.name.endswith("cuda")


def test_the_gpu_page_gives_the_commands_doctor_gives() -> None:
    page = (ROOT / "docs" / "gpu.md").read_text()
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (version,) = [d.split("==")[1] for d in pinned if d.startswith("llama-cpp-python==")]
    kinds: tuple[GpuKind, ...] = ("cuda", "metal", "vulkan", "rocm")
    for kind in kinds:
        assert rebuild_command(kind, version) in page
