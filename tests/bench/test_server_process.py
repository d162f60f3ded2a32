"""The benches' server processes and their loopback client, on real processes and sockets: a
server that comes up, one that exits, one that never answers, one that never gets ready, and one
that will not stop when asked."""

from __future__ import annotations

import io
import os
import sys
import time
import urllib.error
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from localspec.bench import server_process
from localspec.bench.server_process import ServerProcess, failure_text, free_port

FAKE = Path(__file__).with_name("fake_llama_server.py")
# answers every GET with a localspec server that is still calibrating
NEVER_READY = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({"ready": False, "busy": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
print("calibrating", flush=True)
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    monkeypatch.setenv("FAKE_SERVER_ARGS", str(tmp_path / "args.jsonl"))
    port = free_port()
    server = ServerProcess("fake", [sys.executable, str(FAKE), "--port", str(port)], port)
    try:
        yield server
    finally:
        server.close()


def _python(name: str, code: str, *args: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(name, [sys.executable, "-c", code, *args, str(port)], port)


def test_a_server_that_comes_up_answers_json_and_events(fake_server: ServerProcess) -> None:
    assert fake_server.wait_ready() is None
    answer, seconds = fake_server.post("/health", None)
    assert answer == {"status": "ok"} and seconds > 0
    body = {"prompt": [5, 6, 7], "n_predict": 2, "cache_prompt": False, "temperature": 0.0}
    assert fake_server.request_json("/completion", body)["tokens"] == [5, 6]
    assert fake_server.read("/metrics") == b'{"status": "ok"}'
    chat = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 2}
    events = list(fake_server.stream("/v1/chat/completions", chat))
    assert [e["choices"][0]["delta"] for e in events[:2]] == [{"content": "x"}] * 2
    assert events[-2]["usage"] == {"completion_tokens": 2} and events[-1] == "[DONE]"


def test_a_server_that_exits_says_its_exit_code_and_last_words() -> None:
    server = _python("broken", "import sys; print('error: cannot load models'); sys.exit(3)")
    try:
        assert server.wait_ready() == "broken exited with code 3: error: cannot load models"
    finally:
        server.close()


def test_a_server_that_never_answers_is_given_up_on_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_process, "START_TIMEOUT_S", 1.0)
    server = _python("silent", "import time; print('loading', flush=True); time.sleep(60)")
    started = time.monotonic()
    try:
        assert server.wait_ready() == "silent did not answer /health within 1 s: loading"
    finally:
        server.close()
    assert time.monotonic() - started < 30


def test_a_server_that_answers_but_never_gets_ready_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_process, "START_TIMEOUT_S", 3.0)
    server = _python("busy", NEVER_READY)
    try:
        assert server.wait_ready() == "busy was not ready within 3 s: calibrating"
    finally:
        server.close()


def test_a_server_that_ignores_terminate_is_killed() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "print('deaf', flush=True); time.sleep(60)"
    port = free_port()
    server = ServerProcess("deaf", [sys.executable, "-c", code], port, stop_timeout_s=0.5)
    deadline = time.monotonic() + 30
    while server.log_tail() != "deaf" and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGTERM is ignored only from here on
    server.close()
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(server.pid, 0)


def test_an_http_error_reads_as_the_servers_own_words() -> None:
    words = io.BytesIO(b"no slot is free" + b"!" * 1000)
    error = urllib.error.HTTPError("http://127.0.0.1:1/x", 503, "Busy", Message(), words)
    assert failure_text(error) == "HTTP 503: no slot is free" + "!" * 485  # at most 500 chars
    assert failure_text(ValueError("no timings")) == "ValueError('no timings')"
