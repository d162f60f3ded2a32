"""Who may talk to the server: the local user only.

The Unix socket is protected by its file mode (0600 in a 0700 folder). TCP is reachable by
every local process and by web pages through the browser, so over TCP requests need the bearer
token (unless `--no-auth`), a loopback Host header (a DNS-rebinding page sends its own host
name) and, from browsers, a loopback Origin. `/health` stays open so tools can probe it.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

_log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
OPEN_PATHS = frozenset({"/health"})


def _host_name(host_header: str) -> str:
    """`example.com:8080` -> `example.com`, `[::1]:80` -> `::1`; "" for what is no host name
    (`[`, `[::1`: `urlsplit` raises on an unclosed bracket), which no allowed list holds."""
    try:
        parsed = urlsplit(f"//{host_header}")
    except ValueError:
        return ""
    return (parsed.hostname or "").lower()


def _origin_host(origin: str) -> str:
    """The host name in an Origin header (`http://[` is none: "")."""
    try:
        return _host_name(urlsplit(origin).netloc)
    except ValueError:
        return ""


class LocalOnly:
    """ASGI middleware enforcing the rules above; refusals use the OpenAI error shape."""

    def __init__(self, app: ASGIApp, *, token: str | None, extra_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.token = token
        self.hosts = LOOPBACK_NAMES | {h.lower().strip("[]") for h in extra_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        status, message, code = problem
        _log.warning("refused %s %s: %s", scope.get("method"), scope.get("path"), message)
        body = json.dumps(
            {"error": {"message": message, "type": "permission_error", "param": None, "code": code}}
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _problem(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        # uvicorn gives a Unix socket's address as (path, None), a TCP one as (host, port)
        server = scope.get("server")
        over_tcp = server is not None and server[1] is not None
        origin = headers.get("origin")
        if origin and _origin_host(origin) not in self.hosts:
            return 403, f"requests from web pages ({origin}) are not allowed", "foreign_origin"
        if not over_tcp:
            return None
        host = _host_name(headers.get("host", ""))
        if host not in self.hosts:
            return (
                403,
                f"Host '{headers.get('host', '')}' is not this machine: localspec only answers "
                f"requests addressed to localhost",
                "foreign_host",
            )
        if self.token is None or scope.get("path") in OPEN_PATHS:
            return None
        if not self._authorized(headers):
            return (
                401,
                "missing or wrong API key: send 'Authorization: Bearer <token>' (or Anthropic's "
                "'x-api-key: <token>') with the token "
                "that `localspec serve --show-token` prints (or start the server with --no-auth)",
                "invalid_api_key",
            )
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        """The token as a bearer token (OpenAI clients) or as `x-api-key` (Anthropic's)."""
        assert self.token is not None
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        offered = credentials.strip() if scheme.lower() == "bearer" else headers.get("x-api-key")
        return offered is not None and hmac.compare_digest(
            offered.strip().encode(), self.token.encode()
        )
