"""Talking to a running `localspec serve`: find it, send a request, read its event stream.

Built on the standard library's `http.client` rather than an HTTP package: `localspec
complete` through a warm server should answer in a fraction of a second, and importing a
full client library would cost more than the request itself.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localspec.errors import LocalspecError, UsageError
from localspec.paths import default_socket_path, token_path


class ServerUnavailableError(LocalspecError):
    """No server answers at the given address."""


class ServerRequestError(UsageError):
    """The server refused the request (a 4xx answer): the request needs fixing."""


class ServerFailedError(LocalspecError):
    """The server failed to answer (a 5xx answer or a broken stream)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


@dataclass(frozen=True)
class ServerAddress:
    """A Unix socket path or an http:// URL (with the token TCP needs)."""

    socket_path: Path | None = None
    url: str | None = None
    token: str | None = None

    def __str__(self) -> str:
        return f"unix:{self.socket_path}" if self.socket_path else str(self.url)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        parts = urlsplit(self.url or "")
        if parts.scheme != "http" or not parts.hostname:
            raise UsageError(f"{self.url}: give a server as http://HOST:PORT or a socket path")
        return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)


def parse_address(text: str) -> ServerAddress:
    """`unix:/path`, `/path/to/socket` or `http://127.0.0.1:8080`; the TCP token comes from
    $LOCALSPEC_API_KEY or the file `localspec serve --show-token` writes."""
    if text.startswith(("http://", "https://")):
        token = os.environ.get("LOCALSPEC_API_KEY")
        if token is None and token_path().is_file():
            token = token_path().read_text().strip() or None
        return ServerAddress(url=text.rstrip("/"), token=token)
    return ServerAddress(socket_path=Path(text.removeprefix("unix:")).expanduser())


def socket_answers(path: Path, timeout: float = 1.0) -> bool:
    """Whether a server is accepting connections on the Unix socket `path` (a file left by a
    server that did not shut down cleanly does not answer)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def default_server() -> ServerAddress | None:
    """The local server on the default socket, if one is running."""
    path = default_socket_path()
    if not path.exists() or not socket_answers(path, timeout=0.5):
        return None
    return ServerAddress(socket_path=path)


class ServerClient:
    """Requests to one server; each call uses its own connection (closing it cancels)."""

    def __init__(self, address: ServerAddress, timeout: float = 600.0) -> None:
        self.address = address
        self.timeout = timeout

    def get(self, path: str) -> Any:
        connection = self._send("GET", path, None)
        try:
            with self._checked(connection) as response:
                return json.loads(response.read())
        finally:
            connection.close()

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST with `stream: true` and yield each server-sent event's JSON until the end.

        Leaving the loop early closes the connection, which cancels the generation.
        """
        connection = self._send("POST", path, {**body, "stream": True})
        # closed here, not by a finalizer: Ctrl-C landing in a finalizer would be ignored
        try:
            with self._checked(connection) as response:
                yield from self._events(response)
        finally:
            connection.close()

    @staticmethod
    def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                return
            event = json.loads(data)
            if "error" in event:
                raise ServerFailedError(f"the server stopped: {event['error']['message']}")
            yield event

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> http.client.HTTPConnection:
        connection = self.address.connection(self.timeout)
        headers = {"Content-Type": "application/json", "Host": "localhost"}
        if self.address.token:
            headers["Authorization"] = f"Bearer {self.address.token}"
        payload = None if body is None else json.dumps(body).encode()
        try:
            connection.request(method, path, body=payload, headers=headers)
        except OSError as exc:
            connection.close()
            raise ServerUnavailableError(
                f"no localspec server answers at {self.address} ({exc.strerror or exc}): start "
                f"one with `localspec serve`, or use --no-server"
            ) from exc
        return connection

    def _checked(self, connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
        response = connection.getresponse()
        if response.status < 400:
            return response
        try:
            message = json.loads(response.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.reason
        if response.status < 500:
            raise ServerRequestError(f"the server refused the request: {message}")
        raise ServerFailedError(f"the server failed: {message}")
