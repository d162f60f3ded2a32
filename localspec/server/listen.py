"""Where the server listens and how it stops: sockets, the API token, uvicorn.

The Unix socket lives in the user's runtime folder (0700), is created 0600, and is removed on
shutdown. A socket file left by a crashed server is replaced; one that answers means another
server is running, which is reported instead of stealing its path.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from localspec.client import socket_answers
from localspec.errors import LocalspecError, UsageError
from localspec.paths import (
    claim_runtime_dir,
    default_socket_path,
    private_folder,
    read_private,
    token_path,
    write_private,
)

_log = logging.getLogger(__name__)

# sun_path holds 108 bytes on Linux (104 on macOS) including the terminating NUL
_MAX_SOCKET_PATH = 103
_TOKEN_LIMIT = 4096  # a token is 35 characters: a larger file is not one localspec wrote


class AddressInUseError(LocalspecError):
    """Another server already listens where this one would."""


def api_token() -> str:
    """The TCP bearer token, generated on first use and stored 0600 in the config folder."""
    path = token_path()
    try:  # a link is not followed: its target could be any file, and a guessable one
        token = read_private(path, _TOKEN_LIMIT).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if token:
        return token
    token = f"ls-{secrets.token_urlsafe(24)}"
    write_private(path, token + "\n")
    return token


def claim_socket_path(path: Path) -> None:
    """Prepare `path` for binding: no live server there, a stale socket file removed.

    The default folder (and any folder created here) is made 0700; an existing folder the
    user chose is left as it is (the socket itself is always 0600).
    """
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise UsageError(
            f"the socket path {path} is too long for a Unix socket "
            f"({_MAX_SOCKET_PATH} bytes at most): pass a shorter --socket"
        )
    if path.parent == default_socket_path().parent:
        # our own folder is made private, and never through a link (it would be the folder
        # the link points to that became ours and received the socket)
        claim_runtime_dir(path.parent)
    elif not os.path.lexists(path.parent):
        private_folder(path.parent)  # a folder the user chose is theirs to manage
    if not os.path.lexists(path):
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise UsageError(f"{path} exists and is not a socket: remove it or pass another --socket")
    if socket_answers(path):
        raise AddressInUseError(
            f"another localspec server is already running on {path}: stop it first "
            f"(or pass --socket for a second one)"
        )
    _log.info("replacing the stale socket %s", path)
    path.unlink()


def unix_listener(path: Path) -> socket.socket:
    claim_socket_path(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # created 0600: no window in which others could connect
    try:
        listener.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener


def tcp_listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUseError(
                f"port {port} on {host} is already in use: choose another --port"
            ) from exc
        raise LocalspecError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    listener.listen(64)
    return listener


class _JsonErrors(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, writing the 400 it sends for malformed HTTP (a bad request
    line or header, a duplicated Host, a header past h11's size limit) in the OpenAI error
    shape every other refusal has, instead of plain text."""

    def send_400_response(self, msg: str) -> None:
        body = json.dumps(
            {
                "error": {
                    "message": msg,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "malformed_http",
                }
            }
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn's server, telling us first when a signal asks it to stop, so running
    generations are cancelled instead of being waited for."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


@contextlib.contextmanager
def _quiet_signals() -> Iterator[None]:
    """uvicorn re-raises the signal that stopped it once it has shut down; with these
    handlers that ends `serve` normally (exit 0, socket removed) instead of killing it."""
    previous = {
        sig: signal.signal(sig, lambda _s, _f: None) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(app: ASGIApp, listeners: list[socket.socket], on_exit: Callable[[], None]) -> None:
    """Serve until SIGINT/SIGTERM; the caller removes the socket file afterwards."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=5,
        access_log=False,
        http=_JsonErrors,
    )
    server = _Server(config, on_exit)
    with _quiet_signals():
        server.run(sockets=listeners)
