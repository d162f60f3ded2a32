"""Reading a request body: its size, nesting and text are checked before any handler sees it.

A body over the server's limit (`max_body`, in `/props`) is a 413, and no more than the limit
is ever held in memory. JSON nested deeper than MAX_DEPTH levels, a string holding a lone
UTF-16 surrogate (`"\\ud800"` is legal JSON but no text the tokenizer can encode) and numbers
that are not finite (`NaN`, `Infinity`, `1e999`) are 400s naming the field. Real requests are
a few levels deep and carry text; these limits keep hostile bodies away from the recursive
JSON parser, the tokenizer and the sampler.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from localspec.server.wire import RETRY_AFTER_S, ApiError

MAX_DEPTH = 64
"""Levels of arrays and objects a body may nest (a chat request uses four)."""

_MARGIN_BYTES = 8 * 1024 * 1024
_BYTES_PER_TOKEN = 16
_SURROGATE = re.compile("[\ud800-\udfff]")


def default_max_body(n_ctx: int) -> int:
    """The body limit when none is given: a prompt filling the context as escaped JSON text
    (16 bytes a token covers `\\uXXXX` escapes), plus 8 MiB for the fields around it and the
    extra context editors send and the server may drop (llama.vim's `input_extra`)."""
    return _MARGIN_BYTES + _BYTES_PER_TOKEN * n_ctx


BODY_TIMEOUT_S = 60.0
"""How long a body may take to arrive whole (`serve --body-timeout`; beyond: 408). A client
that sends a few bytes now and then kept its connection, and what it had sent, for as long as
it liked: sixty stalled 7 MiB bodies held 430 MB."""


class Receiving:
    """The bytes of bodies still arriving, across requests: at most `limit` are held, beyond
    which a request is told to retry (503), as a full queue's are."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ApiError(
                503,
                f"the server is busy: {self.held} bytes of other request bodies are still "
                f"arriving (at most {self.limit}); retry shortly",
                kind="server_busy",
                code="queue_full",
                # the rest of the body is not read: the connection cannot serve another
                headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
            )
        self.held += size


async def read_body(
    http: Request, max_body: int, receiving: Receiving, timeout_s: float | None = BODY_TIMEOUT_S
) -> bytearray:
    """The body, or a 413 once it passes `max_body`. The rest is still read and dropped:
    clients send the whole body before reading the answer, and closing on them would
    turn the 413 into a reset connection. One buffer grows (chunks joined at the end were
    the body twice over). Its bytes count toward `receiving` until it is whole, and it must
    be whole within `timeout_s` (None: no limit), or the answer is a 503 or a 408."""
    body = bytearray()
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in http.stream():
                size += len(chunk)
                if size <= max_body:
                    receiving.take(len(chunk))
                    body += chunk
                elif body:
                    receiving.held -= len(body)
                    body = bytearray()
    except ClientDisconnect:  # nobody is left to answer: not the server's error to log
        raise ApiError(
            400, "the client closed the connection before sending the whole body"
        ) from None
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive whole within {timeout_s:g} s (after {size} "
            f"bytes); send it at once (`localspec serve --body-timeout S` allows longer)",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None
    finally:
        receiving.held -= len(body)
    if size > max_body:
        raise ApiError(
            413,
            f"the request body is {size} bytes; this server accepts at most {max_body} "
            f"(its `max_body`, in GET /props; `localspec serve --max-body BYTES` raises it)",
            code="request_too_large",
        )
    return body


def parse_json(raw: bytes | bytearray) -> dict[str, Any]:
    """The body's JSON object, checked as the module docstring says."""
    try:
        body = json.loads(raw)
    except RecursionError as exc:  # deeper than the parser's stack allows
        raise _too_deep() from exc
    except (ValueError, UnicodeDecodeError) as exc:  # also integers of over 4,300 digits
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    _check_values(body)
    return body


def _too_deep() -> ApiError:
    return ApiError(
        400, f"the request body nests arrays and objects deeper than {MAX_DEPTH} levels"
    )


def _check_values(body: dict[str, Any]) -> None:
    """Depth, surrogates and non-finite numbers, walked without recursion. Paths are built
    only for containers and for the value that fails, so long token-id lists stay cheap."""
    pending: list[tuple[Any, str, int]] = [(body, "", 1)]
    while pending:
        container, path, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, value in items:
            if isinstance(key, str) and _SURROGATE.search(key):
                raise _surrogate(_join(path, key))
            if isinstance(value, int):
                continue
            if isinstance(value, dict | list):
                pending.append((value, _join(path, key), depth + 1))
            elif isinstance(value, str):
                if not value.isascii() and _SURROGATE.search(value):
                    raise _surrogate(_join(path, key))
            elif isinstance(value, float) and not math.isfinite(value):
                name = _join(path, key)
                raise ApiError(400, f"'{name}' must be a finite number", param=name)


def _join(path: str, key: str | int) -> str:
    """`messages[0].content`: the field's name as a client would write it (printable)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{path}.{key}" if path else key


def _surrogate(name: str) -> ApiError:
    return ApiError(
        400,
        f"'{name}' holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which "
        f"is not text: send valid Unicode",
        param=name,
    )
