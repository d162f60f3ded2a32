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
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localspec.errors import LocalspecError, UsageError
from localspec.paths import default_socket_path, token_path

_RETRY = "retry, or pass --no-server to load the models here"
_READ_SIZE = 65536


class ServerUnavailableError(LocalspecError):
    """No server answers at the given address."""


class ServerRequestError(UsageError):
    """The server refused the request (a 4xx answer): the request needs fixing."""


class ServerFailedError(LocalspecError):
    """The server failed to answer (a 5xx answer, a broken stream, an answer that is not
    localspec's)."""


class ServerTimeoutError(ServerFailedError):
    """The server accepted the request but said nothing for longer than the client waits."""


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
        host, port = _host_and_port(self.url or "")
        return http.client.HTTPConnection(host, port, timeout=timeout)


def _host_and_port(url: str) -> tuple[str, int]:
    """The host and port of an http:// server URL; anything else is a usage error."""
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:  # a port that is not a number in range
        port = 0
    if parts.scheme != "http" or not parts.hostname or not 0 < port < 65536:
        raise UsageError(f"{url}: give a server as http://HOST:PORT or a socket path")
    return parts.hostname, port


def parse_address(text: str) -> ServerAddress:
    """`unix:/path`, `/path/to/socket` or `http://127.0.0.1:8080`; the TCP token comes from
    $LOCALSPEC_API_KEY or the file `localspec serve --show-token` writes."""
    if text.startswith(("http://", "https://")):
        url = text.rstrip("/")
        _host_and_port(url)  # refused now, not after a model load or a connection attempt
        token = os.environ.get("LOCALSPEC_API_KEY")
        if token is None and token_path().is_file():
            token = token_path().read_text().strip() or None
        return ServerAddress(url=url, token=token)
    return ServerAddress(socket_path=Path(text.removeprefix("unix:")).expanduser())


@dataclass(frozen=True)
class ServedModel:
    """What a server says it runs (`GET /v1/models`): its model id and the `meta` object,
    where localspec reports the file names (`target`, `draft`) and load-time settings by
    their `RuntimeSettings` names (`n_ctx`, ...). A key that is absent was not reported."""

    model_id: str
    meta: Mapping[str, Any] = field(default_factory=dict)


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
    """Requests to one server; each call uses its own connection (closing it cancels).

    Every way a server can fail (refusing, dying mid-answer, hanging past `timeout`, sending
    something that is not its JSON) ends in one of this module's errors, never in a traceback.
    """

    def __init__(self, address: ServerAddress, timeout: float = 600.0) -> None:
        self.address = address
        self.timeout = timeout

    def get(self, path: str) -> Any:
        with self._answer(self._send("GET", path, None)) as response:
            return json.loads(response.read())

    def served_model(self) -> ServedModel:
        """The model this server runs and what it reports about how it loaded it."""
        listed = self.get("/v1/models")
        try:
            entry = listed["data"][0]
            meta = entry.get("meta") or {}
            return ServedModel(str(entry["id"]), dict(meta))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise ServerFailedError(
                f"the server at {self.address} lists no model at /v1/models: is it a localspec "
                f"server? pass --no-server to load the models here"
            ) from exc

    def stream(self, path: str, body: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """POST with `stream: true` and yield each server-sent event's JSON until the end.

        Leaving the loop early closes the connection, which cancels the generation.
        """
        with self._answer(self._send("POST", path, {**body, "stream": True})) as response:
            yield from self._events(response)

    @staticmethod
    def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
        for raw in _lines(response):
            line = raw.decode("utf-8").rstrip("\r")
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                return
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError(f"an event is not a JSON object: {data[:80]}")
            if "error" in event:
                raise ServerFailedError(f"the server stopped: {_error_message(event, data)}")
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

    @contextmanager
    def _answer(self, connection: http.client.HTTPConnection) -> Iterator[http.client.HTTPResponse]:
        """The checked response; whatever goes wrong while it is read becomes one line.

        The connection is closed here, not by a finalizer: Ctrl-C landing in a finalizer
        would be ignored.
        """
        try:
            yield self._checked(connection)
        except TimeoutError as exc:
            raise ServerTimeoutError(
                f"the server at {self.address} did not answer within {self.timeout:g} s (it may "
                f"be busy with other requests): {_RETRY}"
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise ServerFailedError(
                f"the server at {self.address} stopped answering mid-reply ({_why(exc)}): {_RETRY}"
            ) from exc
        except ValueError as exc:  # not JSON, not UTF-8, not the shape localspec sends
            raise ServerFailedError(
                f"the server at {self.address} sent an answer localspec cannot read ({exc}): "
                f"is it a localspec server? {_RETRY}"
            ) from exc
        finally:
            connection.close()

    @staticmethod
    def _checked(connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
        response = connection.getresponse()
        if response.status < 400:
            return response
        raw = response.read()
        try:
            message = _error_message(json.loads(raw), response.reason)
        except ValueError:
            message = response.reason
        if response.status < 500:
            raise ServerRequestError(f"the server refused the request: {message}")
        raise ServerFailedError(f"the server failed: {message}")


def _why(exc: Exception) -> str:
    """An I/O error in a few words, on one line (a bad status line quotes what came)."""
    if isinstance(exc, http.client.RemoteDisconnected):
        return "it closed the connection without an answer"
    if isinstance(exc, http.client.BadStatusLine):
        return f"its answer is not HTTP: {' '.join(str(exc).split())[:60]!r}"
    if isinstance(exc, http.client.IncompleteRead):
        return "the connection closed before the answer was complete"
    return " ".join(str(exc).split()) or type(exc).__name__


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The body's lines as they arrive. Read with `read1`, which raises `IncompleteRead` when a
    chunked body is cut off; iterating the response would end quietly instead, as if the
    server had finished."""
    pending = b""
    while data := response.read1(_READ_SIZE):
        *lines, pending = (pending + data).split(b"\n")
        yield from lines
    if pending:
        yield pending


def _error_message(body: Any, fallback: str) -> str:
    """The message of an error body in OpenAI's shape, `fallback` for any other shape."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else fallback
