"""Talking to a running server: find it, send a request, read its event stream.

The server is `localspec serve` on its Unix socket or TCP port, or any HTTP(S) endpoint
speaking OpenAI's API (llama.cpp's llama-server, vLLM, SGLang; `localspec.remote` tells
them apart). Built on the standard library's `http.client` rather than an HTTP package:
`localspec complete` through a warm server should answer in a fraction of a second, and
importing a full client library would cost more than the request itself.

The API key a URL gets (`parse_address`): the one given (`--api-key`), else
$LOCALSPEC_API_KEY, else for a loopback URL the token `localspec serve` keeps (never sent to
another machine), else $OPENAI_API_KEY.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localspec.errors import LocalspecError, UsageError
from localspec.paths import default_socket_path, read_private, token_path

_RETRY = "retry, or pass --no-server to load the models here"
_READ_SIZE = 65536
MAX_ANSWER_BYTES = 32 << 20
"""The largest answer body read whole (a JSON answer, an error's body); a streamed answer is
read a line at a time, each at most this long. A server, remote or hostile, that sends more is
refused, not read into memory until it stops."""
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_URL_FORM = "give a server as http://HOST:PORT, https://HOST[:PORT][/PATH] or a socket path"


class ServerUnavailableError(LocalspecError):
    """No server answers at the given address."""


class ServerRequestError(UsageError):
    """The server refused the request (a 4xx answer): the request needs fixing."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ServerAuthError(ServerRequestError):
    """The server wants an API key, or another one than was sent (401)."""


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
    """A Unix socket path or an http(s):// URL (with the API key it gets, if any).

    A URL's path is a prefix for every request (a proxy's `https://host/llm`); a trailing
    `/v1` is dropped, so an OpenAI base URL as other clients take it works too."""

    socket_path: Path | None = None
    url: str | None = None
    token: str | None = None

    def __str__(self) -> str:
        return f"unix:{self.socket_path}" if self.socket_path else str(self.url)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        scheme, host, port, _prefix = _url_parts(self.url or "")
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def path(self, path: str) -> str:
        """`path` as this server's request target (under the URL's prefix)."""
        return path if self.url is None else _url_parts(self.url)[3] + path


def _url_parts(url: str) -> tuple[str, str, int, str]:
    """Scheme, host, port and path prefix of a server URL; anything else is a usage error."""
    parts = urlsplit(url)
    default_port = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default_port
    except ValueError:  # a port that is not a number in range
        port = 0
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not 0 < port < 65536
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise UsageError(f"{url}: {_URL_FORM} (an API key goes in --api-key)")
    prefix = parts.path.rstrip("/").removesuffix("/v1")
    return parts.scheme, parts.hostname, port, prefix


def parse_address(text: str, api_key: str | None = None) -> ServerAddress:
    """`unix:/path`, `/path/to/socket`, `http://127.0.0.1:8080` or `https://host/v1`; a URL's
    API key comes from `api_key`, else as the module says."""
    if text.startswith(("http://", "https://")):
        url = text.rstrip("/")
        host = _url_parts(url)[1]  # refused now, not after a model load or a connection
        return ServerAddress(url=url, token=api_key or _api_key(host in _LOOPBACK))
    if "://" in text:
        raise UsageError(f"{text}: {_URL_FORM}")
    return ServerAddress(socket_path=Path(text.removeprefix("unix:")).expanduser())


def _api_key(loopback: bool) -> str | None:
    token = os.environ.get("LOCALSPEC_API_KEY")
    if token is None and loopback:
        token = _stored_token()
    return token or os.environ.get("OPENAI_API_KEY") or None


def _stored_token() -> str | None:
    """The token `serve` stored, read as the server reads it: never through a link."""
    try:
        return read_private(token_path(), 4096).decode("ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


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
            return json.loads(_bounded_body(response))

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """A request answered with one JSON body (not a stream)."""
        with self._answer(self._send("POST", path, body)) as response:
            return json.loads(_bounded_body(response))

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
        headers = {"Content-Type": "application/json"}
        if self.address.socket_path is not None:
            headers["Host"] = "localhost"  # a URL's own host goes in by itself
        if self.address.token:
            headers["Authorization"] = f"Bearer {self.address.token}"
        payload = None if body is None else json.dumps(body).encode()
        try:
            connection.request(method, self.address.path(path), body=payload, headers=headers)
        except OSError as exc:
            connection.close()
            why = exc.strerror or _why(exc)
            if self.address.socket_path is None:
                raise ServerUnavailableError(
                    f"no server answers at {self.address} ({why}): check the address and that "
                    f"the server runs, or use --no-server"
                ) from exc
            raise ServerUnavailableError(
                f"no localspec server answers at {self.address} ({why}): start one with "
                f"`localspec serve`, or use --no-server"
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
                f"is it a localspec or OpenAI-compatible server? {_RETRY}"
            ) from exc
        finally:
            connection.close()

    def _checked(self, connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
        response = connection.getresponse()
        if response.status < 400:
            return response
        raw = response.read(MAX_ANSWER_BYTES)  # the message, if the body is longer, is lost
        try:
            message = _error_message(json.loads(raw), response.reason)
        except ValueError:
            message = response.reason
        if response.status == 401:
            raise ServerAuthError(
                f"the server at {self.address} refused the API key ({message}): give its key "
                f"with --api-key or $LOCALSPEC_API_KEY ($OPENAI_API_KEY for other servers)",
                response.status,
            )
        if response.status < 500:
            raise ServerRequestError(f"the server refused the request: {message}", response.status)
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


def _bounded_body(response: http.client.HTTPResponse) -> bytes:
    """The whole body, or `ValueError` past `MAX_ANSWER_BYTES` (what was read is dropped)."""
    raw = response.read(MAX_ANSWER_BYTES + 1)
    if len(raw) > MAX_ANSWER_BYTES:
        raise ValueError(f"an answer of over {MAX_ANSWER_BYTES} bytes")
    return raw


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The body's lines as they arrive, or `ValueError` for one over `MAX_ANSWER_BYTES`. Read
    with `read1`, which raises `IncompleteRead` when a chunked body is cut off; iterating the
    response would end quietly instead, as if the server had finished."""
    pending: list[bytes] = []  # the unfinished line's parts (joined once: linear work)
    held = 0
    while data := response.read1(_READ_SIZE):
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join([*pending, lines[0]])
            pending, held = [], 0
            yield from lines
        pending.append(rest)
        held += len(rest)
        if held > MAX_ANSWER_BYTES:
            raise ValueError(f"a line of over {MAX_ANSWER_BYTES} bytes")
    if tail := b"".join(pending):
        yield tail


def _error_message(body: Any, fallback: str) -> str:
    """The message of an error body in OpenAI's shape, `fallback` for any other shape."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else fallback
