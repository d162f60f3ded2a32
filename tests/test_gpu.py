"""The GPU tier (marker gpu): the real pair with every layer offloaded, where a GPU build and
device exist. Selected with `pytest -m gpu`; skipped, saying why, on a CPU build or machine.

GPU kernels, like the CPU's, change results with the batch width, so the calibration's kernel
noise decides how greedy verification guards near-ties. These tests assert that every mode
and draft length gives plain decoding's answer token for token under that guard, print how
many answers the unguarded batch changes (run with -s), and run a short `bench --quick`.

A lent GPU has no network and cannot carry the real pair: there `LOCALSPEC_GPU_PAIR=tiny`
runs the same tests on the tiny generated pair (`.ci/gpu/check.sh` does), so that exactness on
CUDA is tested wherever a GPU is, with the real pair where it is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import (
    Runtime,
    RuntimeSettings,
    SpecMode,
    SpecSettings,
)
from localspec.llama.backend import build_info
from tests.test_cli import LOCALSPEC
from tests.test_real_pair import generate
from tests.tiny_models import PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model

pytestmark = pytest.mark.gpu

PROMPTS = [
    "Rename `total` to `running_sum` and reply with the code only.\n\n```python\n"
    "def summarize(values):\n    total = 0\n    for v in values:\n        total += v\n"
    "    return total\n```",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Explain what a Python generator is in two sentences.",
]
MODES = [(SpecMode.NGRAM, k) for k in (2, 4, 8)] + [
    (mode, k) for mode in (SpecMode.DRAFT, SpecMode.HYBRID) for k in (2, 4, 8)
]


@pytest.fixture(scope="module")
def gpu_pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The real pair, or with LOCALSPEC_GPU_PAIR=tiny the tiny target and a partly agreeing
    draft, written here."""
    if os.environ.get("LOCALSPEC_GPU_PAIR") != "tiny":
        paths: tuple[Path, Path] = request.getfixturevalue("pair_paths")
        return paths
    folder = tmp_path_factory.mktemp("gpu-tiny")
    target = write_tiny_model(folder / "target.gguf", TinySpec(seed=0))
    draft = write_tiny_model(folder / "draft.gguf", TinySpec(seed=0, noise=PARTIAL_DRAFT_NOISE))
    return target, draft


@pytest.fixture(scope="module")
def gpu_runtime(gpu_pair: tuple[Path, Path]) -> Iterator[Runtime]:
    if not build_info().gpu_offload:
        pytest.skip(
            "llama.cpp here is a CPU build: rebuild llama-cpp-python for your GPU "
            "(`localspec doctor` prints the command)"
        )
    target, draft = gpu_pair
    settings = RuntimeSettings(target=target, draft=draft, n_ctx=2048)  # all layers offloaded
    with Runtime(settings) as runtime:
        runtime.load_draft()
        yield runtime


def test_calibration_measures_the_gpu(gpu_runtime: Runtime) -> None:
    profile = gpu_runtime.hardware_profile(recalibrate=True)
    print(f"\nGPU profile: {json.dumps(profile.to_dict())}")
    assert profile.draft_s is not None and profile.catchup_s is not None
    assert len(profile.tie_noise) == len(profile.verify_s)


@pytest.mark.parametrize(("mode", "k"), MODES)
def test_greedy_speculation_is_plain_decoding_on_the_gpu(
    gpu_runtime: Runtime, mode: SpecMode, k: int
) -> None:
    guarded = SpecSettings(mode, draft_max=k, ngram_draft_max=k)
    unguarded = SpecSettings(mode, draft_max=k, ngram_draft_max=k, redecode_ties=False)
    changed = 0
    for prompt in PROMPTS:
        plain = generate(gpu_runtime, prompt, SpecSettings(SpecMode.OFF))
        assert generate(gpu_runtime, prompt, guarded).tokens == plain.tokens, (mode, k, prompt)
        changed += generate(gpu_runtime, prompt, unguarded).tokens != plain.tokens
    print(f"\n{mode.value} k={k}: unguarded batches changed {changed} of {len(PROMPTS)} answers")


def test_a_quick_bench_runs_on_the_gpu(
    gpu_runtime: Runtime, gpu_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    target, draft = gpu_pair
    out = tmp_path / "bench.json"
    command = [LOCALSPEC, "bench", "--quick", "--json", str(out)]
    command += ["--target", str(target), "--draft", str(draft)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr
    differing = sum(_counts(json.loads(out.read_text())["report"], "outputs_differing_from_off"))
    print(f"\n{result.stdout}\noutputs differing from off: {differing}")
    assert differing == 0


def _counts(tree: object, key: str) -> list[int]:
    """Every value of `key` anywhere in a JSON tree (the report's rows per category, mode)."""
    if isinstance(tree, dict):
        found = [int(v) for k, v in tree.items() if k == key]
        return found + [n for v in tree.values() for n in _counts(v, key)]
    if isinstance(tree, list):
        return [n for v in tree for n in _counts(v, key)]
    return []
