"""Turning request bodies into prompts, a bounded number of bytes at a time.

A body becomes a prompt through several copies of itself for a moment: the parsed JSON, the
messages, the chat template's text, the tokens. That work ran beside the queue, as many at
once as clients sent: eight concurrent 6.7 MiB `count_tokens` bodies peaked at 3.4 GB. Here
every endpoint's body is admitted by its size (`BodyGate`): the bodies in work add up to at
most `capacity` bytes (one larger body goes alone), in arrival order, and the bodies waiting
for their turn to at most `WAITING_BODIES` times that, beyond which the request is a 503 to
retry, as a full queue is. A request's turn ends when its job is queued (`release`), where
the worker's queue bounds it, or when it is answered. Bodies still arriving count too, up to
the same bound (beyond: 503), and each must arrive within `serve --body-timeout` (408): sixty
clients stalled in the middle of 7 MiB bodies held 430 MB, for as long as they liked.

Parsing runs on a worker thread: 110,000 Responses input items take seconds to check and
read, and on the event loop they kept `/health` from answering.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from localspec.server.body import BODY_TIMEOUT_S, Receiving, parse_json, read_body
from localspec.server.wire import RETRY_AFTER_S, ApiError

WAITING_BODIES = 16
"""How many gates' worth of bodies may wait for their turn (beyond: 503)."""


class BodyGate:
    """At most `capacity` bytes of bodies in work at once, in arrival order; before that, at
    most `WAITING_BODIES` times as many still arriving (`receiving`), each within
    `timeout_s` (`localspec.server.body.read_body`)."""

    def __init__(self, capacity: int, timeout_s: float | None = BODY_TIMEOUT_S) -> None:
        self.capacity = capacity
        self.held = 0  # bytes of the bodies in work
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self.receiving = Receiving(WAITING_BODIES * capacity)
        self.timeout_s = timeout_s

    @property
    def waiting(self) -> int:
        """Bytes of the bodies waiting for their turn."""
        return sum(weight for weight, _turn in self._waiting)

    async def enter(self, size: int) -> Callable[[], None]:
        """Wait for the turn of a body of `size` bytes; returns what ends it."""
        weight = min(size, self.capacity)
        if self.waiting + weight > WAITING_BODIES * self.capacity:
            raise ApiError(
                503,
                f"the server is busy: {self.waiting} bytes of request bodies wait for their "
                f"turn (at most {WAITING_BODIES} x max_body); retry shortly",
                kind="server_busy",
                code="queue_full",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        if self._waiting or self.held + weight > self.capacity:
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append((weight, turn))
            try:
                await turn
            except BaseException:  # the client left: its place goes, or its turn if it came
                if turn.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiting.remove((weight, turn))
                    self._wake()
                else:
                    self._leave(weight)
                raise
        else:
            self.held += weight
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self._leave(weight)

        return leave

    def _leave(self, weight: int) -> None:
        self.held -= weight
        self._wake()

    def _wake(self) -> None:
        """Give the next waiting bodies their turn while they fit, in arrival order."""
        while self._waiting and self.held + self._waiting[0][0] <= self.capacity:
            weight, turn = self._waiting.popleft()
            if not turn.cancelled():
                self.held += weight
                turn.set_result(None)


_LEAVE = "localspec_body_turn"


async def read_fields(http: Request, gate: BodyGate, max_body: int) -> dict[str, Any]:
    """The request's JSON object, read and checked (`localspec.server.body`) in its turn at
    `gate`, which it keeps until `release`."""
    raw = await read_body(http, max_body, gate.receiving, gate.timeout_s)
    setattr(http.state, _LEAVE, await gate.enter(len(raw)))
    return await run_in_threadpool(parse_json, raw)


def release(http: Request) -> None:
    """End the request's turn at the gate, if it has one (again: nothing)."""
    leave = getattr(http.state, _LEAVE, None)
    if leave is not None:
        leave()
