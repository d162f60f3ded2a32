"""`serve --record FILE`: every generation request's body, appended to a JSON-lines file.

A coding agent's traffic is the workload speculation should be judged on (the same files and
tool results come back turn after turn), and it cannot be written by hand: the agent's own
system prompt, tools and turns are what matter. Recording is off unless asked for; the file
holds the user's prompts and code, so it is created 0600 and never through a link. Each line
is `{"path", "at", "body"}` (`at`: seconds since the server started), which
`localspec bench agent` replays.

Recording serves the user, never the other way round: the file must be a regular file of the
user's (a FIFO would hang startup, a device fails every write), a body over the server's limit
is neither held nor recorded (the server refuses it with a 413), a lone surrogate is written
as its JSON escape, and a write that fails (a full disk) is logged once while every answer
goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.errors import UsageError
from localspec.paths import PrivatePathError, open_private
from localspec.server.body import default_max_body

_log = logging.getLogger(__name__)

RECORDED_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/v1/messages",
        "/v1/responses",
        "/completion",
        "/completions",
        "/infill",
    }
)


class Recorder:
    """Appends records to `path` (created 0600, never through a link: `open_private`)."""

    def __init__(self, path: Path) -> None:
        try:
            self._fd = open_private(path, append=True)
        except PrivatePathError as exc:
            raise UsageError(f"--record: {exc}") from exc
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._failed = False
        self.path = path
        self.max_body = default_max_body(0)
        """Bodies larger than this are refused by the server and not recorded (`serve` sets
        it to the server's own limit)."""

    def write(self, request_path: str, body: bytes) -> None:
        """Append one record; a body that is not JSON (refused with a 400) is skipped. After
        a write failed, nothing more is written (the file stays whole lines for `bench
        agent`)."""
        if self._failed:
            return
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            return  # refused with a 400 anyway: nothing to replay
        at = round(time.monotonic() - self._started, 3)
        line = json.dumps({"path": request_path, "at": at, "body": parsed}) + "\n"
        try:
            with self._lock:
                _append_whole(self._fd, line.encode())
        except OSError as exc:
            if not self._failed:
                _log.warning("cannot record to %s (%s): requests go on unrecorded", self.path, exc)
            self._failed = True

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _append_whole(descriptor: int, data: bytes) -> None:
    """Append all of `data`, or none of it: a write that fails part-way is cut off again, so
    the file holds whole lines only."""
    start = os.fstat(descriptor).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(descriptor, view) :]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, start)
        raise


class Recording:
    """ASGI middleware: hands the bodies of POSTs to generation endpoints to `recorder`."""

    def __init__(self, app: ASGIApp, *, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path"))
        if path not in RECORDED_PATHS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0

        async def watched() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                size += len(chunk)
                if size <= self.recorder.max_body:
                    chunks.append(chunk)
                else:
                    chunks.clear()  # refused with a 413: neither held nor recorded
                if not message.get("more_body", False) and size <= self.recorder.max_body:
                    body = b"".join(chunks)
                    await anyio.to_thread.run_sync(self.recorder.write, path, body)
            return message

        await self.app(scope, watched, send)
