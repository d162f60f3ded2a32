"""Every module the CLI and the test suite import, then a model load, in a fresh process.

A CUDA build of llama.cpp (an H200, 2026-12-04) segfaulted at the first model load of `pytest`
and `localspec bench` but not of a plain script loading the same file: which libraries a
process has loaded, and in which order, decides where llama.cpp's C++ calls bind. So this
test does what those processes do, in their order: import everything first (every `localspec`
and `tui` module, every top-level package any test imports), then load a model with all
layers offloaded where the build can, and decode. A crash shows as the signal that ended the
process. It runs on the CPU build everywhere and on the CUDA build where one is lent
(`.ci/gpu/check.sh` runs `tests/llama`).
"""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROCESS = r"""
import importlib, pkgutil, sys
names = sys.argv[2:]
for package in ("localspec", "tui"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not info.name.endswith("__main__"):  # it would run the command
            names.append(info.name)
for name in names:
    importlib.import_module(name)
print("IMPORTED", len(names), flush=True)
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel, ModelSettings
with LlamaModel(sys.argv[1], ModelSettings(n_gpu_layers=-1)) as model:
    with LlamaContext(model, 256) as context:
        _, logits = context.prefill_logits([1, 2, 3])
        print("DECODED", logits is not None, flush=True)
"""


def imported_by_tests() -> list[str]:
    """The top-level modules the test files import, outside this project and the stdlib."""
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    own = {"localspec", "tui", "tests", "__future__"}
    return sorted(n for n in names - own if n not in sys.stdlib_module_names)


def test_the_test_suites_imports_are_found() -> None:
    found = imported_by_tests()
    assert {"pytest", "llama_cpp", "openai", "anthropic", "numpy", "textual"} <= set(found)


def test_a_model_loads_after_every_import_the_cli_and_tests_make(tiny_target: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS, str(tiny_target), *imported_by_tests()],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    ended = f"signal {signal.Signals(-done.returncode).name}" if done.returncode < 0 else ""
    assert done.returncode == 0, f"{ended} rc={done.returncode}\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("IMPORTED ")
    assert int(lines[0].split()[1]) > 200  # every localspec and tui module, not a handful
    assert lines[-1] == "DECODED True"
