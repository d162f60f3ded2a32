"""A server that dies mid-answer, never answers or speaks something else: one-line errors.

The servers here are real Unix-socket servers (socketserver threads) that misbehave on purpose;
`localspec complete` is run against them as a real subprocess too.
"""

from __future__ import annotations

import contextlib
import socketserver
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localspec.client import (
    MAX_ANSWER_BYTES,
    ServerAddress,
    ServerClient,
    ServerFailedError,
    ServerRequestError,
    ServerTimeoutError,
    parse_address,
)
from localspec.errors import UsageError
from tests.server.conftest import short_socket_dir

LOCALSPEC = str(Path(sys.executable).with_name("localspec"))
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
FIRST_EVENT = b'data: {"content": "par", "stop": false}\n\n'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        self.rfile.read(length)
        behaviour: Callable[[socketserver.StreamRequestHandler], None]
        behaviour = self.server.behaviour  # type: ignore[attr-defined]
        behaviour(self)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def misbehaving() -> Iterator[
    Callable[[Callable[[socketserver.StreamRequestHandler], None]], Path]
]:
    """Start a server on a short socket path that answers every request with `behaviour`."""
    servers: list[_Server] = []

    def start(behaviour: Callable[[socketserver.StreamRequestHandler], None]) -> Path:
        path = short_socket_dir() / "bad.sock"
        server = _Server(str(path), _Handler)
        server.behaviour = behaviour  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return path

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


released = threading.Event()


@pytest.fixture(autouse=True)
def release_silent_servers() -> Iterator[None]:
    released.clear()
    yield
    released.set()


def dies_mid_answer(handler: socketserver.StreamRequestHandler) -> None:
    handler.wfile.write(STREAM_HEAD + chunk(FIRST_EVENT))
    handler.wfile.flush()  # then the connection closes without the last chunk


def never_answers(_handler: socketserver.StreamRequestHandler) -> None:
    released.wait(120)


def speaks_something_else(handler: socketserver.StreamRequestHandler) -> None:
    handler.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")


def sends_broken_json(handler: socketserver.StreamRequestHandler) -> None:
    handler.wfile.write(STREAM_HEAD + chunk(b"data: {not json\n\n") + b"0\r\n\r\n")


def refuses_without_json(handler: socketserver.StreamRequestHandler) -> None:
    body = b"<html>no</html>"
    head = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body)
    handler.wfile.write(head + body)


def test_a_server_dying_mid_answer_is_a_server_failure(misbehaving: Callable[..., Path]) -> None:
    client = ServerClient(ServerAddress(socket_path=misbehaving(dies_mid_answer)), timeout=60)
    received: list[dict[str, object]] = []
    with pytest.raises(ServerFailedError, match="stopped answering mid-reply") as failed:
        received.extend(client.stream("/completion", {"prompt": "x"}))
    assert received == [{"content": "par", "stop": False}]
    assert "--no-server" in str(failed.value)


def test_a_server_that_never_answers_times_out(misbehaving: Callable[..., Path]) -> None:
    client = ServerClient(ServerAddress(socket_path=misbehaving(never_answers)), timeout=0.5)
    with pytest.raises(ServerTimeoutError, match=r"did not answer within 0\.5 s"):
        client.get("/v1/models")
    with pytest.raises(ServerTimeoutError):
        list(client.stream("/completion", {"prompt": "x"}))


@pytest.mark.parametrize(
    ("behaviour", "error", "words"),
    [
        (speaks_something_else, ServerFailedError, "stopped answering mid-reply"),
        (sends_broken_json, ServerFailedError, "an answer localspec cannot read"),
        (refuses_without_json, ServerRequestError, "refused the request: Bad Request"),
    ],
)
def test_other_answers_are_one_error_each(
    misbehaving: Callable[..., Path],
    behaviour: Callable[[socketserver.StreamRequestHandler], None],
    error: type[Exception],
    words: str,
) -> None:
    client = ServerClient(ServerAddress(socket_path=misbehaving(behaviour)), timeout=60)
    with pytest.raises(error, match=words):
        list(client.stream("/completion", {"prompt": "x"}))


OVER_BOUND = MAX_ANSWER_BYTES + (16 << 20)
MIB_OF_A = b"a" * (1 << 20)


def sends_a_huge_json_string(handler: socketserver.StreamRequestHandler) -> None:
    """A valid JSON answer, 16 MiB over the bound, then the end of it (if the client is
    still there)."""
    with contextlib.suppress(OSError):
        handler.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"' % (OVER_BOUND + 2))
        for _ in range(OVER_BOUND >> 20):
            handler.wfile.write(MIB_OF_A)
        handler.wfile.write(b'"')


def streams_a_huge_event(handler: socketserver.StreamRequestHandler) -> None:
    """One valid event whose line is 16 MiB over the bound, then the stream's end."""
    with contextlib.suppress(OSError):
        handler.wfile.write(STREAM_HEAD + chunk(b'data: {"content": "'))
        for _ in range(OVER_BOUND >> 20):
            handler.wfile.write(chunk(MIB_OF_A))
        handler.wfile.write(chunk(b'"}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def test_an_answer_past_the_bound_is_refused_not_read_whole(
    misbehaving: Callable[..., Path],
) -> None:
    """A remote `--server` that sends without end (or just a lot) would have been read into
    memory until it stopped: past `MAX_ANSWER_BYTES` the answer is one error."""
    whole = ServerClient(ServerAddress(socket_path=misbehaving(sends_a_huge_json_string)))
    with pytest.raises(ServerFailedError, match=f"an answer of over {MAX_ANSWER_BYTES} bytes"):
        whole.post("/completion", {"prompt": "x"})
    streamed = ServerClient(ServerAddress(socket_path=misbehaving(streams_a_huge_event)))
    with pytest.raises(ServerFailedError, match=f"a line of over {MAX_ANSWER_BYTES} bytes"):
        list(streamed.stream("/completion", {"prompt": "x"}))


def test_a_bad_server_url_is_refused_before_connecting() -> None:
    for url in ("http://127.0.0.1:port", "http://127.0.0.1:99999", "http://"):
        with pytest.raises(UsageError, match="give a server as http://HOST:PORT"):
            parse_address(url)


def complete(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, "complete", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    ("behaviour", "extra", "words"),
    [
        (dies_mid_answer, ("--raw",), "stopped answering mid-reply"),
        (dies_mid_answer, (), "stopped answering mid-reply"),  # the chat endpoint
        (speaks_something_else, ("--raw",), "stopped answering mid-reply"),
        # --ctx-size makes `complete` ask the server what it runs first: the 5 s probe
        (never_answers, ("--ctx-size", "512"), "did not answer within 5 s"),
    ],
)
def test_complete_through_a_failing_server_prints_one_line(
    misbehaving: Callable[..., Path],
    behaviour: Callable[[socketserver.StreamRequestHandler], None],
    extra: tuple[str, ...],
    words: str,
) -> None:
    result = complete("--server", f"unix:{misbehaving(behaviour)}", *extra, "hi")
    assert result.returncode == 1
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
