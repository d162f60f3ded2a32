"""The client path stays light: `--version`, `--help`, `models` and `complete` through a running
server never import llama.cpp, numpy or gguf (the models load in the server, not here).

Each command runs in a fresh interpreter, which then lists the heavy modules it loaded: an
import at module level anywhere on the way (a constant taken from `localspec.llama`, whose
package loads llama_cpp) shows up here, not as a slow start someone has to notice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import Server, server_env, short_socket_dir, start_server

__all__ = ["server_env"]  # the module-scoped user folders the server below runs in

HEAVY = ("llama_cpp", "numpy", "gguf")
# runs `localspec.cli.main` with the arguments given, then writes what it loaded to argv[1]
_SCRIPT = """
import json, sys
from localspec.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""
RUNNING = ("logging", "ctypes", "tempfile", "localspec.paths")
"""What only running a command needs: `--version` and `--help` end while parsing, before it."""


class Run:
    """What `localspec ARGS` did in its own interpreter: its exit code, the modules it
    imported (the heavy ones apart), and what it wrote on stderr."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        report = tmp_path / "loaded.json"
        result = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(report), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            timeout=120,  # a hang guard
            check=False,
        )
        assert report.exists(), result.stderr
        found = json.loads(report.read_text())
        self.code: int = found["code"]
        self.modules: list[str] = found["modules"]
        self.heavy = [name for name in self.modules if name.split(".")[0] in HEAVY]
        self.stderr = result.stderr


@pytest.fixture(scope="module")
def served(server_env: None, tiny_target: Path) -> Iterator[tuple[Server, Path]]:
    """A server on the default socket of a runtime folder of its own (that folder returned)."""
    runtime = short_socket_dir()
    running = start_server(
        tiny_target, None, "--ctx-size", "512", socket_path=runtime / "localspec" / "localspec.sock"
    )
    yield running, runtime
    assert running.stop() == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["complete", "--help"],
        ["serve", "--help"],
        ["bench", "--help"],
        ["models"],
    ],
    ids=" ".join,
)
def test_commands_that_load_no_model_import_nothing_heavy(tmp_path: Path, args: list[str]) -> None:
    run = Run(tmp_path, *args)
    assert (run.code, run.heavy) == (0, []), run.stderr


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["bench", "engine", "--help"]])
def test_version_and_help_import_only_the_parser(tmp_path: Path, args: list[str]) -> None:
    run = Run(tmp_path, *args)
    assert run.code == 0, run.stderr
    assert [name for name in RUNNING if name in run.modules] == []


def test_complete_through_a_server_imports_nothing_heavy(
    tmp_path: Path, served: tuple[Server, Path]
) -> None:
    """By URL (`--server`), and on the default socket (a server found without asking)."""
    server, runtime = served
    by_url = ["--server", server.url, "--api-key", server.token or ""]
    for where, via in ((by_url, server.url), ([], f"unix:{server.socket_path}")):
        run = Run(
            tmp_path,
            "complete",
            *where,
            "--max-tokens",
            "4",
            "--stats",
            "hello",
            env={"XDG_RUNTIME_DIR": str(runtime)},
        )
        assert (run.code, run.heavy) == (0, []), run.stderr
        assert json.loads(run.stderr.splitlines()[-1])["via"] == via


def test_the_check_sees_a_heavy_import(tmp_path: Path, tiny_target: Path) -> None:
    """`complete` with the models loaded here does import llama.cpp: the check is not vacuous."""
    run = Run(
        tmp_path, "complete", "--no-server", "--target", str(tiny_target), "--max-tokens", "2", "hi"
    )
    assert run.code == 0, run.stderr
    assert {name.split(".")[0] for name in run.heavy} == set(HEAVY)
