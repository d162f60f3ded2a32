"""A stream whose first event is slow (a long prompt) sends its headers and keep-alives.

Driven on the event loop with a future the test completes itself, so the order of what is
sent is asserted without any timing: keep-alives while the first event is awaited, then the
events, then the end; closing the stream early closes the job's events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from localspec.server.jobs import Payload, Wire, stream_body
from localspec.server.worker import Cached
from localspec.speculative.engine import Event, Finished, TextChunk
from localspec.speculative.stats import GenerationStats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def named_wire(keepalive: Payload | None) -> Wire:
    return Wire(
        answer=lambda event: {"text": event.text},
        piece=lambda _event, text: {"type": "delta", "text": text},
        ending=lambda event: [{"type": "end", "text": event.text}],
        opening=({"type": "start"},),
        named=True,
        keepalive=keepalive,
    )


async def later_events(closed: list[bool]) -> AsyncGenerator[Event | Cached]:
    try:
        yield TextChunk("b", [2], "target", 0)
        yield Finished("ab", [1, 2], "stop", GenerationStats("off"))
    finally:
        closed.append(True)


async def read(wire: Wire, rounds_before_first: int) -> tuple[list[bytes], list[bool]]:
    """The stream's writes, with the first event arriving after `rounds_before_first`
    keep-alive intervals have passed on the loop."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[Event | Cached] = loop.create_future()
    closed: list[bool] = []
    writes: list[bytes] = []
    async for data in stream_body(wire, first, later_events(closed), keepalive_s=0.01):
        writes.append(data)
        keepalives = sum(b"keep-alive" in w or b"ping" in w for w in writes)
        if not first.done() and keepalives == rounds_before_first:
            first.set_result(TextChunk("a", [1], "target", 0))
    return writes, closed


@pytest.mark.anyio
async def test_keepalives_then_the_events() -> None:
    writes, closed = await read(named_wire({"type": "ping"}), rounds_before_first=2)
    assert writes == [
        b'event: start\ndata: {"type": "start"}\n\n',
        b'event: ping\ndata: {"type": "ping"}\n\n',
        b'event: ping\ndata: {"type": "ping"}\n\n',
        b'event: delta\ndata: {"type": "delta", "text": "a"}\n\n',
        b'event: delta\ndata: {"type": "delta", "text": "b"}\n\n',
        b'event: end\ndata: {"type": "end", "text": "ab"}\n\n',
    ]
    assert closed == [True]


@pytest.mark.anyio
async def test_a_comment_where_the_api_has_no_ping() -> None:
    writes, _closed = await read(named_wire(None), rounds_before_first=1)
    assert writes[1] == b": keep-alive\n\n"
    assert len(writes) == 5


@pytest.mark.anyio
async def test_a_first_event_in_time_sends_no_keepalive() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[Event | Cached] = loop.create_future()
    first.set_result(TextChunk("a", [1], "target", 0))
    closed: list[bool] = []
    body = stream_body(named_wire({"type": "ping"}), first, later_events(closed), 0.01)
    writes = [data async for data in body]
    assert not any(b"ping" in data for data in writes)
    assert len(writes) == 4 and closed == [True]
