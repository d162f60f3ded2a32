"""`serve --record FILE`: every generation request's body, appended to a JSON-lines file.

A coding agent's traffic is the workload speculation should be judged on (the same files and
tool results come back turn after turn), and it cannot be written by hand: the agent's own
system prompt, tools and turns are what matter. Recording is off unless asked for; the file
holds the user's prompts and code, so it is created 0600 and never through a link. Each line
is `{"path", "at", "body"}` (`at`: seconds since the server started), which
`localspec bench --agent` replays.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.errors import UsageError

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
    """Appends records to `path` (created 0600, not followed if it is a link)."""

    def __init__(self, path: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        try:
            self._fd = os.open(path, flags, 0o600)
        except OSError as exc:
            raise UsageError(
                f"cannot record to {path} ({exc.strerror or exc}): give --record a file path "
                f"in a folder you can write (a link is refused)"
            ) from exc
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.path = path

    def write(self, request_path: str, body: bytes) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            return  # refused with a 400 anyway: nothing to replay
        at = round(time.monotonic() - self._started, 3)
        line = json.dumps({"path": request_path, "at": at, "body": parsed}, ensure_ascii=False)
        with self._lock:
            os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


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

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self.recorder.write(path, b"".join(chunks))
            return message

        await self.app(scope, watched, send)
