"""Bodies that never finish arriving (slowloris): bounded in memory, and answered in time.

A body's bytes were held until it was whole, with no bound across requests and no deadline:
sixty clients stalled in the middle of 7 MiB bodies held 430 MB, and their connections stayed
open as long as they liked. Now the bodies still arriving hold at most `WAITING_BODIES` times
`max_body` (beyond: 503), and each must arrive within `serve --body-timeout` (beyond: 408).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.cli import serve_parser
from localspec.server import body
from localspec.server.admission import WAITING_BODIES
from tests.server.conftest import Server, start_server

MAX_BODY = 1 << 20
STALLED = WAITING_BODIES + 24
ANSWER_GUARD_S = 120.0  # a hang guard: the stalled bodies are answered within the timeout


@pytest.fixture(scope="module")
def guarded(server_env: None, tiny_target: Path) -> Iterator[Server]:
    running = start_server(
        tiny_target,
        None,
        "--ctx-size",
        "512",
        "--max-body",
        str(MAX_BODY),
        "--body-timeout",
        "3",
    )
    yield running
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)


def _stall(server: Server, answers: list[bytes]) -> None:
    """Send all of a body but its last byte, then wait for the server's answer."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(ANSWER_GUARD_S)
        connection.connect(str(server.socket_path))
        head = (
            b"POST /completion HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % MAX_BODY
        )
        # refused (and closed) before it had all of it: the answer is read all the same
        with contextlib.suppress(OSError):
            connection.sendall(head + b"a" * (MAX_BODY - 1))
        answer = b""
        # the server closes the connection after its answer (a reset: the body is unread)
        with contextlib.suppress(ConnectionResetError):
            while chunk := connection.recv(65536):
                answer += chunk
        answers.append(answer)


def test_stalled_bodies_are_bounded_in_memory_and_answered_in_time(guarded: Server) -> None:
    answers: list[bytes] = []
    senders = [threading.Thread(target=_stall, args=(guarded, answers)) for _ in range(STALLED)]
    for sender in senders:
        sender.start()
    with guarded.unix() as http:
        assert http.get("/health").json()["status"] == "ok"
    for sender in senders:
        sender.join(ANSWER_GUARD_S)
    statuses = [answer.split(b" ", 2)[1] for answer in answers]
    assert len(statuses) == STALLED, "a stalled body was never answered"
    assert set(statuses) <= {b"503", b"408"}, answers
    # at most WAITING_BODIES bodies of MAX_BODY are held while they arrive; the rest retry
    assert statuses.count(b"503") >= STALLED - WAITING_BODIES
    timed_out = [answer for answer in answers if b" 408 " in answer.split(b"\r\n")[0]]
    assert timed_out and all(b"--body-timeout" in answer for answer in timed_out)
    with guarded.unix() as http:
        assert http.post("/completion", json={"prompt": "x", "n_predict": 1}).status_code == 200


def test_the_parser_default_is_the_servers() -> None:
    assert serve_parser.BODY_TIMEOUT_S == body.BODY_TIMEOUT_S
