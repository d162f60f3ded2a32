"""The server processes the benchmarks start, and the one HTTP client they talk to them with.

Every benchmark that measures a server (llama-server as the engine bench's baseline, `localspec
serve` and llama-server in the editor, concurrency and agent benches) starts it on a free
loopback port, waits for its `/health`, sends JSON and reads server-sent events, then stops it.
This module owns those steps once, so that every bench waits, times out and reports a server
that never came up alike. It is the benches' client only: the product's own client
(`localspec.client`) and the server's event stream (`localspec.server`) are separate surfaces.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

START_TIMEOUT_S = 300.0
"""How long a server may take to load its models and answer /health as ready."""
REQUEST_TIMEOUT_S = 600.0
"""How long one request may take: a long answer on a slow CPU, not a stuck server."""
STOP_TIMEOUT_S = 30.0
"""How long a terminated server may take to exit before it is killed."""
LOG_TAIL_LINES = 5
_POLL_S = 0.25
_SSE_DATA = b"data:"
# the servers are on loopback: an HTTP(S)_PROXY in the environment must not reroute requests
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
FAILURES = (OSError, ValueError, KeyError, TypeError)
"""What a request to a server may raise: the bench reports it for that server and goes on."""

T = TypeVar("T")


class InBackground(Generic[T]):
    """A request run on its own thread while the bench sends others to the same server (a
    chat or a long prompt, with an editor's completions meanwhile). `done` is set when it
    ends, answered or not; its failure is raised again on the bench's thread by `result`."""

    def __init__(self, name: str, request: Callable[[], T]) -> None:
        self.done = threading.Event()
        self._answers: list[T] = []
        self._failures: list[Exception] = []
        self._request = request
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._answers.append(self._request())
        except FAILURES as exc:
            self._failures.append(exc)
        finally:
            self.done.set()

    @property
    def failed(self) -> bool:
        return bool(self._failures)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def result(self, what: str, timeout_s: float) -> T:
        """Its answer, once it ended within `timeout_s`; its failure raised again."""
        self.join(timeout_s)
        if self._failures:
            raise self._failures[0]
        if not self._answers:
            raise TimeoutError(f"{what} did not end within {timeout_s:.0f} s")
        return self._answers[0]


def free_port() -> int:
    """A loopback port nothing listens on now, for a server to be started on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def failure_text(exc: Exception) -> str:
    """What went wrong with a request, with an HTTP error's body (the server's own words)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}"
    return repr(exc)


class LoopbackClient:
    """JSON and server-sent events over HTTP to a server on this machine's loopback port."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def _open(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        """The open response to `body` as JSON, POSTed (a GET when `body` is None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        return _OPENER.open(request, timeout=timeout)

    def request_json(
        self, path: str, body: dict[str, Any] | None, timeout: float = REQUEST_TIMEOUT_S
    ) -> Any:
        """The answer's JSON (GET when `body` is None)."""
        with self._open(path, body, timeout) as response:
            return json.load(response)

    def post(self, path: str, body: dict[str, Any] | None) -> tuple[Any, float]:
        """The answer's JSON and the round trip in seconds (GET when `body` is None)."""
        started = time.perf_counter()
        answer = self.request_json(path, body)
        return answer, time.perf_counter() - started

    def read(self, path: str) -> bytes:
        """A GET's whole body, as it came (a /metrics scrape is text, not JSON)."""
        with self._open(path, None, REQUEST_TIMEOUT_S) as response:
            content: bytes = response.read()
            return content

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[Any]:
        """A server-sent-events answer's `data:` payloads as they arrive: each one's JSON,
        or the text `[DONE]` that ends OpenAI's streams."""
        with self._open(path, body, REQUEST_TIMEOUT_S) as response:
            for line in response:
                if line.startswith(_SSE_DATA):
                    data = line[len(_SSE_DATA) :].strip()
                    yield data.decode() if data == b"[DONE]" else json.loads(data)


def _ready(health: Any) -> bool:
    """Whether a /health answer says ready and idle: localspec says so once it has calibrated;
    llama-server's `{"status": "ok"}` has neither key and comes once it has loaded (before, an
    error status)."""
    return isinstance(health, dict) and bool(health.get("ready", True)) and not health.get("busy")


class ServerProcess(LoopbackClient):
    """A server on a loopback port that the bench started, talks to and stops; its output goes
    to a temporary file whose last lines explain a failure."""

    def __init__(
        self, name: str, command: list[str], port: int, *, stop_timeout_s: float = STOP_TIMEOUT_S
    ) -> None:
        super().__init__(port)
        self.name = name
        self._stop_timeout_s = stop_timeout_s
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self._process.pid

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self._log.seek(0)
        return " | ".join(self._log.read().decode(errors="replace").strip().splitlines()[-lines:])

    def wait_ready(self) -> str | None:
        """None once /health says ready and idle, else why not: the exit code, or whether it
        never answered or never became ready in time, with the last lines of its log."""
        deadline = time.monotonic() + START_TIMEOUT_S
        answered = False
        while (left := deadline - time.monotonic()) > 0:
            code = self._process.poll()
            if code is not None:
                return f"{self.name} exited with code {code}: {self.log_tail()}"
            try:
                # the deadline is the only limit: a slow answer while loading is still one
                health = self.request_json("/health", None, timeout=left)
                answered = True
            except (OSError, ValueError):
                health = None
            if _ready(health):
                return None
            time.sleep(_POLL_S)
        what = "was not ready" if answered else "did not answer /health"
        return f"{self.name} {what} within {START_TIMEOUT_S:.0f} s: {self.log_tail()}"

    def close(self) -> None:
        """Terminate the server, kill it if it has not exited in time, drop its log."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()
