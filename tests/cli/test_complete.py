"""`localspec complete` as a Unix tool: real subprocesses, tiny models, a real server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.cli.complete import extract_code
from tests.server.conftest import LOCALSPEC, Server, short_socket_dir, start_server, wait_until_idle

# long enough (minutes) that it is surely still running when the test interrupts it
LONG_CTX = ("--ctx-size", "32768")
LONG = ("--raw", "--spec", "off", "--ignore-eos", "--max-tokens", "100000", *LONG_CTX)


def run(*args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, "complete", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A short private runtime folder: the default socket path must fit a Unix socket."""
    folder = short_socket_dir("lsrt-")
    folder.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def default_server(
    runtime_dir: Path, tiny_target: Path, tiny_draft_noisy: Path
) -> Iterator[Server]:
    """A server on the default socket, which `complete` finds by itself."""
    server = start_server(
        tiny_target,
        tiny_draft_noisy,
        auth=False,
        socket_path=runtime_dir / "localspec" / "localspec.sock",
    )
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize(
    "shape",
    [
        ("--max-tokens", "16"),
        ("--raw", "--max-tokens", "16", "--spec", "ngram"),
        ("--fim", "--suffix", "):\n    return x\n", "--max-tokens", "8"),
        ("-s", "Answer briefly.", "--max-tokens", "16", "--spec", "draft", "--draft-max", "3"),
    ],
)
def test_server_and_in_process_give_the_same_greedy_text(
    default_server: Server, tiny_target: Path, tiny_draft_noisy: Path, shape: tuple[str, ...]
) -> None:
    common: tuple[str | Path, ...] = (
        "--target",
        tiny_target,
        "--draft",
        tiny_draft_noisy,
        *shape,
        "--stats",
    )
    served = run(*common, stdin="def f(x")
    local = run(*common, "--no-server", stdin="def f(x")
    assert served.returncode == local.returncode == 0, served.stderr + local.stderr
    assert served.stdout == local.stdout
    served_stats = json.loads(served.stderr.strip().splitlines()[-1])
    local_stats = json.loads(local.stderr.strip().splitlines()[-1])
    assert served_stats["via"] == f"unix:{default_server.socket_path}"
    assert local_stats["via"] == "in-process"
    assert served_stats["generated_tokens"] == local_stats["generated_tokens"]


def test_json_output_shape(tiny_target: Path) -> None:
    result = run("--target", tiny_target, "--raw", "--max-tokens", "8", "--json", "hi")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert set(record) == {"text", "finish_reason", "stats"}
    assert record["finish_reason"] in ("stop", "length")
    stats = record["stats"]
    for key in ("tokens_per_second", "ttft_s", "acceptance_rate", "mean_acceptance_length"):
        assert key in stats
    assert stats["via"] == "in-process"
    assert result.stdout.count("\n") == 1  # one line, nothing else on stdout


def test_no_stream_and_extract_without_a_fence_print_the_whole_answer(tiny_target: Path) -> None:
    args = ("--target", tiny_target, "--raw", "--max-tokens", "8", "hi")
    streamed = run(*args)
    at_end = run(*args, "--no-stream")
    extracted = run(*args, "-x")
    assert streamed.stdout == at_end.stdout == extracted.stdout
    assert streamed.returncode == 0


def test_extract_code_takes_the_first_fenced_block() -> None:
    text = "Here:\n```python\ndef f():\n    return 1\n```\nand\n```sh\nls\n```\n"
    assert extract_code(text) == "def f():\n    return 1\n"
    assert extract_code("no code here") == "no code here"


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("--suffix", "x", "p"), 2, "need --fim"),
        (("--fim", "--suffix", "x", "--suffix-file", "f", "p"), 2, "once"),
        (("--fim", "--suffix-file", "/nonexistent/suffix", "p"), 2, "--suffix-file"),
        (("--raw", "-s", "be brief", "p"), 2, "--system"),
        (("--server", "/tmp/no-such-localspec.sock", "p"), 1, "no localspec server answers"),
        (("--max-tokens", "0", "p"), 2, "--max-tokens"),
    ],
)
def test_failures_are_one_line_with_their_exit_code(
    tiny_target: Path, args: tuple[str, ...], code: int, words: str
) -> None:
    result = run("--target", tiny_target, *args)
    assert result.returncode == code
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_missing_model_file_exits_1(tmp_path: Path) -> None:
    result = run("--target", tmp_path / "absent.gguf", "p")
    assert result.returncode == 1
    assert "absent.gguf" in result.stderr


def start_long(target: Path, *extra: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [LOCALSPEC, "complete", "--target", str(target), *LONG, *extra, "once"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.read(8)  # generation is under way
    return process


def assert_cancelled_once(server: Server) -> None:
    """The server's generation ended because the client left, not by running out (a state,
    whatever the machine's speed: LONG cannot finish before the client is gone)."""
    wait_until_idle(server, timeout=60)
    with server.unix() as http:
        assert http.get("/health").json()["cancelled"] == 1


@pytest.fixture(params=["in-process", "through-server"])
def long_run_server(
    request: pytest.FixtureRequest, runtime_dir: Path, tiny_target: Path
) -> Iterator[Server | None]:
    """No server (in-process), or a server on the default socket that `complete` will use."""
    if request.param == "in-process":
        yield None
        return
    server = start_server(
        tiny_target,
        None,
        "--spec",
        "off",
        *LONG_CTX,
        auth=False,
        socket_path=runtime_dir / "localspec" / "localspec.sock",
    )
    yield server
    assert server.stop() == 0


def test_broken_pipe_ends_quietly_and_cancels(
    long_run_server: Server | None, tiny_target: Path
) -> None:
    process = start_long(tiny_target)
    assert process.stdout is not None
    process.stdout.close()  # `| head -c 8` exits
    assert process.wait(timeout=20) == 0
    assert process.stderr is not None
    assert process.stderr.read() == b""
    if long_run_server is not None:
        assert_cancelled_once(long_run_server)


def test_ctrl_c_exits_130_and_cancels(long_run_server: Server | None, tiny_target: Path) -> None:
    process = start_long(tiny_target)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 130  # a hang guard
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    if long_run_server is not None:
        assert_cancelled_once(long_run_server)


def test_an_explicit_other_model_does_not_use_the_server(
    default_server: Server, tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """A server runs `target`; asking for another model loads it here instead."""
    other = short_socket_dir() / "other.gguf"
    other.symlink_to(tiny_target)
    result = run("--target", other, "--raw", "--max-tokens", "4", "--stats", "hi")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.strip().splitlines()[-1])["via"] == "in-process"
    assert os.environ["XDG_RUNTIME_DIR"] in str(default_server.socket_path)
