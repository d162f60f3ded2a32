"""Serving behaviour: errors, security checks, cancellation, the queue, socket life cycle."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.server.conftest import LOCALSPEC, Server, short_socket_dir, start_server

LONG = {"prompt": "once upon a time", "n_predict": 100000, "ignore_eos": True, "stream": True}


def error_of(response: httpx2.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, object] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"messages": "hi"}', 400, "'messages'"),
        (b'{"messages": []}', 400, "non-empty"),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}',
            400,
            "'max_tokens'",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": -1}',
            400,
            "temperature",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}], "spec": "warp"}', 400, "spec.mode"),
    ],
)
def test_malformed_requests_get_a_json_4xx(
    server: Server, body: bytes, status: int, words: str
) -> None:
    with server.tcp() as http:
        response = http.post("/v1/chat/completions", content=body)
        assert response.status_code == status
        assert words in str(error_of(response)["message"])
        assert http.get("/health").json()["status"] == "ok"  # and the server keeps serving


def test_oversize_prompt_is_refused_with_counts(server: Server) -> None:
    with server.unix() as http:
        response = http.post("/completion", json={"prompt": "word " * 2000, "n_predict": 4})
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "context_length_exceeded"
    assert "1024" in str(error["message"])  # the server's --ctx-size
    assert "never truncates" in str(error["message"])


def test_unknown_route_is_json_404(server: Server) -> None:
    with server.unix() as http:
        response = http.get("/v2/everything")
    assert response.status_code == 404
    assert error_of(response)["type"] == "not_found_error"


def test_tcp_needs_the_token_but_health_is_open(server: Server) -> None:
    with server.tcp(auth=False) as http:
        assert http.get("/health").status_code == 200
        refused = http.post("/completion", json={"prompt": "a", "n_predict": 1})
    assert refused.status_code == 401
    assert "--show-token" in str(error_of(refused)["message"])
    with server.unix() as http:  # the Unix socket is private already: no token needed
        assert http.post("/completion", json={"prompt": "a", "n_predict": 1}).status_code == 200


def test_foreign_host_and_origin_are_refused(server: Server) -> None:
    with server.tcp() as http:
        rebinding = http.get("/v1/models", headers={"Host": "attacker.example:80"})
        page = http.post(
            "/completion",
            json={"prompt": "a", "n_predict": 1},
            headers={"Origin": "https://attacker.example"},
        )
        local_page = http.get("/v1/models", headers={"Origin": "http://localhost:3000"})
    assert rebinding.status_code == 403
    assert error_of(rebinding)["code"] == "foreign_host"
    assert page.status_code == 403
    assert error_of(page)["code"] == "foreign_origin"
    assert local_page.status_code == 200


def wait_idle(http: httpx2.Client, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        health = http.get("/health").json()
        if not health["busy"] and health["waiting"] == 0:
            return time.monotonic() - started
        time.sleep(0.01)
    raise AssertionError("the generation was not cancelled")


def test_disconnect_mid_stream_cancels_and_the_next_request_works(server: Server) -> None:
    with server.unix() as http:
        before = http.get("/health").json()["cancelled"]
        with http.stream("POST", "/completion", json=LONG) as response:
            lines = response.iter_lines()
            received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in received)
        wait_idle(http, timeout=30.0)
        assert http.get("/health").json()["cancelled"] == before + 1
        after = http.post("/completion", json={"prompt": "x", "n_predict": 3, "ignore_eos": True})
    assert after.status_code == 200
    assert after.json()["timings"]["predicted_n"] == 3


def wait_busy(http: httpx2.Client) -> None:
    """Until the server is generating (a hang guard only: 30 s)."""
    deadline = time.monotonic() + 30
    while not http.get("/health").json()["busy"]:
        assert time.monotonic() < deadline, "the generation never started"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def roomy_server(server_env: None, tiny_target: Path) -> Iterator[Server]:
    """A window of 16k tokens: an answer that runs to its end takes thousands of steps, so
    on a loaded machine too the client is gone long before it could finish by itself."""
    running = start_server(tiny_target, None, "--ctx-size", "16384", "--spec", "off")
    yield running
    assert running.stop() == 0


def test_disconnect_while_waiting_for_a_whole_answer_cancels(roomy_server: Server) -> None:
    """A client that leaves a non-streaming request mid-generation stops it: the server
    counts one more cancelled generation (a state, not a duration) and becomes idle."""
    server = roomy_server
    body = json.dumps({**LONG, "stream": False}).encode()
    with server.unix() as http:
        before = http.get("/health").json()["cancelled"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(server.socket_path))
            raw.sendall(
                b"POST /completion HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            wait_busy(http)
        wait_idle(http, timeout=30.0)
        assert http.get("/health").json()["cancelled"] == before + 1


def test_two_clients_at_once_both_get_answers(server: Server) -> None:
    results: list[int] = []

    def ask(prompt: str) -> None:
        with server.unix() as http:
            response = http.post(
                "/completion", json={"prompt": prompt, "n_predict": 32, "ignore_eos": True}
            )
            results.append(response.json()["timings"]["predicted_n"])

    threads = [threading.Thread(target=ask, args=(p,)) for p in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [32, 32]


def test_queue_limit_answers_503_with_retry_after(server_env: None, tiny_target: Path) -> None:
    busy = start_server(tiny_target, None, "--queue", "1", "--spec", "off", auth=False)
    try:
        with busy.unix() as first, busy.unix() as second, busy.unix() as third:
            with first.stream("POST", "/completion", json=LONG) as running:
                # keep the iterator: dropping it closes the connection (a disconnect)
                lines = running.iter_lines()
                next(lines)
                waiting = threading.Thread(
                    target=lambda: second.post("/completion", json={"prompt": "b", "n_predict": 2}),
                )
                waiting.start()
                deadline = time.monotonic() + 30  # a hang guard
                while third.get("/health").json()["waiting"] < 1:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                refused = third.post("/completion", json={"prompt": "c", "n_predict": 2})
            waiting.join(30)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "2"
        assert error_of(refused)["code"] == "queue_full"
    finally:
        assert busy.stop() == 0


def test_no_auth_server_and_live_socket_refusal(server_env: None, tiny_target: Path) -> None:
    first = start_server(tiny_target, None, "--spec", "off", auth=False)
    try:
        with first.tcp() as http:
            assert http.post("/completion", json={"prompt": "a", "n_predict": 1}).status_code == 200
        second = subprocess.run(
            [LOCALSPEC, "serve", "--target", str(tiny_target), "--socket", str(first.socket_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1
        assert "already running" in second.stderr
    finally:
        assert first.stop() == 0


def test_stale_socket_file_is_replaced(server_env: None, tiny_target: Path) -> None:
    folder = short_socket_dir()
    stale = folder / "s.sock"
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(stale))  # bound, never listening: what a killed server leaves
    leftover.close()
    process = subprocess.Popen(
        [LOCALSPEC, "serve", "--target", str(tiny_target), "--socket", str(stale), "--spec", "off"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with httpx2.Client(
                    transport=httpx2.HTTPTransport(uds=str(stale)), base_url="http://localhost"
                ) as http:
                    assert http.get("/health").status_code == 200
                    break
            except httpx2.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
    finally:
        process.terminate()
        assert process.wait(30) == 0
    assert not stale.exists()
