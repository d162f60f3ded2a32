"""`complete` and a running server: options the server cannot honour are never dropped.

A real server on the default socket runs the tiny target with --ctx-size 1024 and one
thread. Options it matches, and options left out, use it silently; an option it does not
match (or does not report) loads the models in-process with a one-line notice, or, with
--server, is refused in one line.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import LOCALSPEC, Server, server_env, short_socket_dir, start_server

__all__ = ["server_env"]  # the module-scoped user folders the server below runs in


@pytest.fixture(scope="module")
def served(server_env: None, tiny_target: Path) -> Iterator[tuple[Server, Path]]:
    runtime = short_socket_dir("lsrt-")
    runtime.chmod(0o700)
    socket_path = runtime / "localspec" / "localspec.sock"
    server = start_server(
        tiny_target, None, "--ctx-size", "1024", auth=False, socket_path=socket_path
    )
    yield server, runtime
    assert server.stop() == 0


@pytest.fixture
def server(served: tuple[Server, Path], monkeypatch: pytest.MonkeyPatch) -> Server:
    """The module's server, on this test's default socket (where `complete` looks)."""
    running, runtime = served
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return running


def complete(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, "complete", "--raw", "--spec", "off", "--stats", *map(str, args), "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def via(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stderr.strip().splitlines()[-1])["via"])


def notices(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stderr.strip().splitlines()[:-1]  # all but the --stats line


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--max-tokens", "4", "--temperature", "0.5", "--seed", "3", "--stop", r"\n"),
        ("--ctx-size", "1024"),  # matches the server's
        ("--threads", "1"),  # so does this: /v1/models reports its load settings
        ("--offline",),  # nothing to fetch either way
        ("--flash-attn", "auto"),  # the server's default
        ("--draft-ctx-size", "1024"),  # the server's draft context is its --ctx-size
        ("--ubatch-size", "512"),  # the server's batch, its calls where no editor stops one
    ],
)
def test_options_the_server_honours_use_it_silently(
    server: Server, tiny_target: Path, options: tuple[str, ...]
) -> None:
    result = complete("--target", tiny_target, *options)
    assert via(result) == f"unix:{server.socket_path}"
    assert notices(result) == []


def test_the_server_reports_its_draft_context(server: Server) -> None:
    with server.unix() as http:
        assert http.get("/props").json()["draft_n_ctx"] == 1024
        assert http.get("/v1/models").json()["data"][0]["meta"]["draft_n_ctx"] == 1024


def test_a_forced_server_that_matches_is_used(server: Server) -> None:
    result = complete("--server", server.socket_path, "--ctx-size", "1024")
    assert via(result) == f"unix:{server.socket_path}"
    assert notices(result) == []


@pytest.mark.parametrize(
    ("options", "notice"),
    [
        (
            ("--ctx-size", "2048"),
            "runs with --ctx-size 1024; loading the models in-process for --ctx-size 2048",
        ),
        (
            ("--threads", "3"),
            "runs with --threads 1; loading the models in-process for --threads 3",
        ),
        (("--gpu-layers", "0"), "loading the models in-process for --gpu-layers 0"),
        (("--mmap",), "loading the models in-process for --mmap"),
        (
            ("--flash-attn", "on"),
            "runs with --flash-attn auto; loading the models in-process for --flash-attn on",
        ),
        (
            ("-ub", "64"),
            "runs with --ubatch-size 512; loading the models in-process for --ubatch-size 64",
        ),
        (
            ("-cd", "512"),
            "runs with --draft-ctx-size 1024; loading the models in-process for "
            "--draft-ctx-size 512",
        ),
    ],
)
def test_a_load_option_the_server_does_not_match_loads_here_and_says_why(
    server: Server, tiny_target: Path, options: tuple[str, ...], notice: str
) -> None:
    result = complete("--target", tiny_target, *options)
    assert via(result) == "in-process"
    [line] = notices(result)
    assert line.startswith(f"localspec: the server at unix:{server.socket_path} ")
    assert notice in line


def test_another_model_loads_here_and_says_why(server: Server, tiny_target: Path) -> None:
    other = short_socket_dir() / "other.gguf"
    other.symlink_to(tiny_target)
    result = complete("--target", other)
    assert via(result) == "in-process"
    assert notices(result) == [
        f"localspec: the server at unix:{server.socket_path} runs target target.gguf; "
        f"loading the models in-process for target other.gguf"
    ]


def test_a_forced_server_that_cannot_honour_an_option_is_refused(
    server: Server, tiny_target: Path
) -> None:
    result = complete("--server", server.socket_path, "--ctx-size", "2048", "--threads", "3")
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert "runs with --ctx-size 1024" in line
    assert "--ctx-size 2048, --threads 3 cannot apply there" in line
    assert "--no-server" in line


@pytest.mark.parametrize("where", ["server", "in-process"])
def test_a_full_context_is_reported_alike_on_both_paths(
    server: Server, tiny_target: Path, where: str
) -> None:
    """The server's wire says "length"; its `localspec.stop` says "context", as in-process."""
    extra = ("--no-server", "--ctx-size", "1024") if where == "in-process" else ()
    extra = (*extra, "--target", tiny_target)
    result = complete("--ignore-eos", "--max-tokens", "2000", "--json", *extra)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["finish_reason"] == "context"
    assert record["stats"]["generated_tokens"] < 2000
    assert "stop" not in record["stats"]  # the same keys on both paths
    assert (record["stats"]["via"] == "in-process") == (where == "in-process")


@pytest.mark.parametrize("option", ["--no-history", "--no-suffix-store"])
def test_what_the_server_keeps_its_own_of_loads_here_or_refuses_a_forced_server(
    server: Server, tiny_target: Path, option: str
) -> None:
    """A server keeps its own history and suffix store: `--no-history` and
    `--no-suffix-store` can only be honoured here."""
    result = complete("--target", tiny_target, option)
    assert via(result) == "in-process"
    assert notices(result) == [
        f"localspec: {option}: the models load here (a server keeps its own history, guard "
        f"and store)"
    ]
    forced = complete("--server", server.socket_path, option)
    assert forced.returncode == 2
    assert f"{option}: for models loaded here; a server keeps its own history" in forced.stderr
