"""A stand-in for the Hugging Face Hub's `resolve` endpoint, served on a real local socket.

It answers what `huggingface_hub.hf_hub_download` asks of the Hub: a `HEAD` for the file's
metadata (commit, ETag, size), then a `GET`, with `Range: bytes=N-` when it resumes. Every
file is served the way the Hub serves an LFS file, whose ETag is its SHA-256. The server can
also misbehave on purpose: serve bytes that do not match the SHA-256 it advertises, or cut
the connection part-way through a body. Every request is recorded, so tests can see whether
a download was resumed.
"""

from __future__ import annotations

import hashlib
import re
import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import unquote

_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"^bytes=(?P<start>\d+)-(?P<end>\d*)$")


@dataclass(frozen=True)
class Request:
    """One request as the server saw it; `sent` counts the body bytes it set out to write."""

    method: str
    path: str
    range: str | None
    status: int
    sent: int


class FakeHub:
    """Serves `files[(repo, filename)]` at one `commit` (also reachable as "main").

    `corrupt`: serve every file with one byte flipped, while the headers still advertise the
    true SHA-256 and size. `cut_after`: end the first `cuts` GET responses after that many body
    bytes, with a clean close (the client sees a short body) or, with `reset`, a TCP reset.
    `refuse`: answer every request with this HTTP status and none of the Hub's headers, the way
    a proxy that blocks the Hub does. `hold_after`: the first GET sends that many body bytes,
    then waits until `release` is set before it sends the rest, so a test can look at a
    download half done.
    """

    def __init__(
        self,
        files: Mapping[tuple[str, str], bytes],
        commit: str,
        *,
        corrupt: bool = False,
        cut_after: int | None = None,
        cuts: int = 1,
        reset: bool = False,
        refuse: int | None = None,
        hold_after: int | None = None,
    ) -> None:
        self.files = dict(files)
        self.commit = commit
        self.corrupt = corrupt
        self.cut_after = cut_after
        self.reset = reset
        self.refuse = refuse
        self._cuts_left = cuts if cut_after is not None else 0
        self._hold_after = hold_after
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def gets(self) -> list[Request]:
        return [request for request in self.requests if request.method == "GET"]

    def record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def take_cut(self) -> int | None:
        """How many body bytes the next GET may send before the cut (None: no cut)."""
        with self._lock:
            if self._cuts_left <= 0:
                return None
            self._cuts_left -= 1
            return self.cut_after

    def take_hold(self) -> int | None:
        """How many body bytes the next GET sends before it waits for `release` (None: all)."""
        with self._lock:
            held, self._hold_after = self._hold_after, None
            return held

    def body(self, data: bytes) -> bytes:
        if not self.corrupt or not data:
            return data
        damaged = bytearray(data)
        damaged[len(data) // 2] ^= 0xFF
        return bytes(damaged)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, hub: FakeHub, *args: Any) -> None:
        self.hub = hub
        super().__init__(*args)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads `FakeHub.requests` instead of a log on stderr."""

    def do_HEAD(self) -> None:
        self._resolve(send_body=False)

    def do_GET(self) -> None:
        self._resolve(send_body=True)

    def _resolve(self, *, send_body: bool) -> None:
        if self.hub.refuse is not None:
            self._error(self.hub.refuse, None)
            return
        match = _RESOLVE.match(self.path.split("?", 1)[0])
        if match is None:
            self._error(404, "RepoNotFound")
            return
        repo, revision, name = match["repo"], unquote(match["revision"]), unquote(match["file"])
        if not any(known == repo for known, _ in self.hub.files):
            self._error(404, "RepoNotFound")
            return
        if revision not in (self.hub.commit, "main"):
            self._error(404, "RevisionNotFound")
            return
        data = self.hub.files.get((repo, name))
        if data is None:
            self._error(404, "EntryNotFound")
            return
        start = 0
        status = 200
        wanted = self.headers.get("Range")
        if wanted is not None and (requested := _RANGE.match(wanted.strip())) is not None:
            start = int(requested["start"])
            if start >= len(data):
                self._error(416, "RangeNotSatisfiable", content_range=f"bytes */{len(data)}")
                return
            status = 206
        body = self.hub.body(data)[start:]
        cut = self.hub.take_cut() if send_body else None
        sent = min(len(body), cut) if cut is not None else len(body)
        self.hub.record(Request(self.command, self.path, wanted, status, sent if send_body else 0))
        self.send_response(status)
        sha256 = hashlib.sha256(data).hexdigest()
        self.send_header("X-Repo-Commit", self.hub.commit)
        self.send_header("ETag", f'"{sha256}"')
        self.send_header("X-Linked-Etag", f'"{sha256}"')
        self.send_header("X-Linked-Size", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Disposition", f'inline; filename="{name.rsplit("/", 1)[-1]}";')
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if not send_body:
            return
        held = self.hub.take_hold()
        try:
            if held is not None:
                self.wfile.write(body[:held])
                self.wfile.flush()
                self.hub.release.wait(60)  # a hang guard: the test releases it
            self.wfile.write(body[held or 0 : sent])
        except OSError:  # the client gave up; nothing left to tell it
            self.close_connection = True
            return
        if cut is not None:
            self._cut()

    def _cut(self) -> None:
        self.close_connection = True
        if self.hub.reset:
            # linger 0: closing discards what is unsent and sends RST instead of FIN; the
            # socket only really closes once the reader made from it is closed too
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
        else:
            self.connection.shutdown(socket.SHUT_WR)

    def _error(self, status: int, code: str | None, content_range: str | None = None) -> None:
        self.hub.record(Request(self.command, self.path, self.headers.get("Range"), status, 0))
        message = f"{code or status}: {self.path}".encode()
        self.send_response(status)
        if code is not None:
            self.send_header("X-Error-Code", code)
        if code == "EntryNotFound":
            self.send_header("X-Repo-Commit", self.hub.commit)
        if content_range is not None:
            self.send_header("Content-Range", content_range)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(message)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(message)
