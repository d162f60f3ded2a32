r"""The `--stop "\n\n"` example of docs/usage.md, run as the shell runs it, stops at a blank line.

A shell passes `"\n\n"` as a backslash and an n, twice; `complete` unescapes it. Seed 0 of
the tiny weights never writes a newline; seed 12's answer to the example's prompt at its
temperature and seed has a blank line after a few dozen tokens, so the stop has
something to stop at (the test checks that first).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import LOCALSPEC, Server, short_socket_dir, start_server
from tests.tiny_models import TinySpec, write_tiny_model

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def readme_example() -> list[str]:
    """The usage page's `complete ... --stop` line, split the way a POSIX shell splits it."""
    for line in USAGE.read_text().splitlines():
        if line.startswith("localspec complete") and "--stop" in line:
            return shlex.split(line, comments=True)[1:]
    raise AssertionError("docs/usage.md has no `localspec complete ... --stop` example")


@pytest.fixture(scope="module")
def blank_line_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "seed12.gguf", TinySpec(seed=12))


@pytest.fixture(params=["in-process", "through-server"])
def where(request: pytest.FixtureRequest, blank_line_model: Path) -> Iterator[tuple[str, ...]]:
    """The options that make `complete` run in-process, or through a real server."""
    if request.param == "in-process":
        yield ("--no-server", "--target", str(blank_line_model))
        return
    socket_path = short_socket_dir() / "s.sock"
    server: Server = start_server(blank_line_model, None, auth=False, socket_path=socket_path)
    yield ("--server", str(socket_path))
    assert server.stop() == 0


def complete(argv: list[str], where: tuple[str, ...]) -> dict[str, str]:
    # --spec off: sampled answers are exact in every mode, but they are not the same draws
    command, rest = argv[0], argv[1:]
    result = subprocess.run(
        [LOCALSPEC, command, *where, "--spec", "off", "--json", *rest],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    record: dict[str, str] = json.loads(result.stdout)
    return record


def test_the_readme_stop_example_stops_at_a_blank_line(where: tuple[str, ...]) -> None:
    argv = readme_example()
    stop_at = argv.index("--stop")
    assert argv[stop_at + 1] == "\\n\\n"  # what the shell hands over: backslashes, not newlines
    unstopped = complete(argv[:stop_at] + argv[stop_at + 2 :], where)["text"]
    assert "\n\n" in unstopped, "the model no longer writes a blank line: pick another seed"
    stopped = complete(argv, where)
    assert stopped["finish_reason"] == "stop"
    assert stopped["text"] == unstopped[: unstopped.index("\n\n")]
