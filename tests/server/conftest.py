"""A real `localspec serve` process on tiny models, reached over real sockets."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest

from tests.qwen_template import QWEN25_TEMPLATE
from tests.tiny_models import TinySpec, write_tiny_model

LOCALSPEC = str(Path(sys.executable).with_name("localspec"))
STARTUP_TIMEOUT_S = 60.0


@dataclass
class Server:
    process: subprocess.Popen[str]
    socket_path: Path
    port: int
    token: str | None
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tcp(self, *, auth: bool = True, timeout: float = 60.0) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=timeout)

    def unix(self, timeout: float = 60.0) -> httpx2.Client:
        transport = httpx2.HTTPTransport(uds=str(self.socket_path))
        return httpx2.Client(transport=transport, base_url="http://localhost", timeout=timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


_SHORT_ROOT: list[Path] = []


def short_socket_dir(prefix: str = "ls-") -> Path:
    """A new private folder with a short path: Unix socket paths are limited to ~104 bytes,
    and pytest's tmp paths can be longer. All of them live in one folder of this test run,
    removed when it ends (pytest's own are kept for the last runs; these would pile up)."""
    if not _SHORT_ROOT:
        _SHORT_ROOT.append(Path(tempfile.mkdtemp(prefix="lstest-", dir="/tmp")))
        atexit.register(shutil.rmtree, _SHORT_ROOT[0], ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_SHORT_ROOT[0]))


def start_server(
    target: Path,
    draft: Path | None,
    *extra: str,
    auth: bool = True,
    socket_path: Path | None = None,
    threads: int | None = 1,
) -> Server:
    # by default a folder the server creates itself, which must become 0700
    socket_path = socket_path or short_socket_dir() / "sock" / "s.sock"
    command = [
        LOCALSPEC,
        "serve",
        "--target",
        str(target),
        "--socket",
        str(socket_path),
        "--port",
        "0",
        *(["--threads", str(threads)] if threads else []),
        *extra,
    ]
    if draft is not None:
        command += ["--draft", str(draft)]
    if not auth:
        command.append("--no-auth")
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line.rstrip("\n"))
            if "http://127.0.0.1:" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready.wait(0.1):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(log))
    match = next(re.search(r"127\.0\.0\.1:(\d+)", line) for line in log if "http://" in line)
    assert match is not None
    token = None
    if auth:
        token = subprocess.run(
            [LOCALSPEC, "serve", "--show-token"], capture_output=True, text=True, check=True
        ).stdout.strip()
    server = Server(process, socket_path, int(match.group(1)), token, log)
    try:
        wait_until_idle(server)
    except BaseException:
        process.kill()  # a fixture that fails here never reaches its stop()
        raise
    return server


def wait_until_idle(server: Server, timeout: float = 300.0) -> None:
    """Wait for calibration (auto mode warms up on the worker) and running jobs to finish.

    A hang guard only: the real pair calibrates for tens of seconds on a busy 2-core machine."""
    deadline = time.monotonic() + timeout
    with server.unix() as client:
        while time.monotonic() < deadline:
            health = client.get("/health").json()
            if not health["busy"] and health["waiting"] == 0 and health.get("ready", True):
                return
            time.sleep(0.05)
    raise AssertionError("server stayed busy")


@pytest.fixture(scope="module")
def server_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module-scoped servers outlive the per-test directory fixture: give them their own."""
    home = tmp_path_factory.mktemp("server-user")
    saved = dict(os.environ)
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "HF_HOME"):
        (home / var).mkdir()
        os.environ[var] = str(home / var)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def server(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    """One server for the module: auth on, the exact draft so speculation is visible."""
    running = start_server(tiny_target, tiny_draft_exact, "--ctx-size", "1024")
    yield running
    assert running.stop() == 0
    assert not running.socket_path.exists(), "the socket file must be removed on shutdown"


@pytest.fixture(scope="module")
def qwen_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Tiny target and draft with Qwen2.5's chat template, which renders tools and calls."""
    folder = tmp_path_factory.mktemp("qwen-template")
    spec = TinySpec(seed=0, chat_template=QWEN25_TEMPLATE)
    target = write_tiny_model(folder / "target.gguf", spec)
    return target, write_tiny_model(folder / "draft.gguf", spec)


@pytest.fixture(scope="module")
def qwen_server(server_env: None, qwen_models: tuple[Path, Path]) -> Iterator[Server]:
    """A server on the Qwen-template models: the tool-calling tests of every API run here."""
    running = start_server(*qwen_models, "--ctx-size", "2048")
    yield running
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)
