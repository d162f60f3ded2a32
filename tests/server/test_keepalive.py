"""A stream whose first event is slow (a long prompt) sends its headers and keep-alives.

Driven on the event loop with a future the test completes itself, so the order of what is
sent is asserted without any timing: keep-alives while the first event is awaited, then the
events, then the end; closing the stream early closes the job's events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message, MessageParam

from localspec.server.anthropic_api import STILL_THERE
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
        # before the first event, everything after the opening is a keep-alive
        if not first.done() and len(writes) - len(wire.opening) == rounds_before_first:
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


def anthropic_wire(keepalive: Payload) -> Wire:
    """The Messages API's event sequence for a text answer, as `anthropic_api` writes it."""
    head = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m"}
    start: dict[str, Any] = {**head, "content": [], "stop_reason": None, "stop_sequence": None}
    usage = {"input_tokens": 3, "output_tokens": 0}
    return Wire(
        answer=lambda event: {"text": event.text},
        piece=lambda _event, text: {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text},
        },
        ending=lambda _event: [
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
            {"type": "message_stop"},
        ],
        opening=(
            {"type": "message_start", "message": {**start, "usage": usage}},
            {"type": "ping"},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        named=True,
        keepalive=keepalive,
    )


def sdk_reads(body: bytes) -> tuple[list[str], Message]:
    """What the `anthropic` SDK's stream gives its caller for `body` (the events' types)
    and the message it puts together; the HTTP layer is an in-memory transport."""
    transport = httpx2.MockTransport(
        lambda _request: httpx2.Response(
            200, content=body, headers={"content-type": "text/event-stream"}
        )
    )
    sdk = anthropic.Anthropic(
        api_key="k", base_url="http://localspec", http_client=httpx2.Client(transport=transport)
    )
    ask: list[MessageParam] = [{"role": "user", "content": "hi"}]
    with sdk.messages.stream(model="m", max_tokens=8, messages=ask) as stream:
        seen: list[str] = [event.type for event in stream]
        return seen, stream.get_final_message()


@pytest.mark.anyio
async def test_the_messages_keepalive_is_an_event_the_sdk_passes_on_and_changes_nothing() -> None:
    """Claude Code aborts a stream after 300 s without an event its SDK yields, and the SDK
    drops `ping`s: the keep-alive must reach the caller, and leave the message as it was."""
    kept, _closed = await read(anthropic_wire(STILL_THERE), rounds_before_first=3)
    plain, _closed = await read(anthropic_wire({"type": "ping"}), rounds_before_first=3)
    kept_seen, kept_message = sdk_reads(b"".join(kept))
    plain_seen, plain_message = sdk_reads(b"".join(plain))
    assert kept_seen.count("message_delta") == 3 + 1  # three keep-alives, then the real one
    assert plain_seen.count("message_delta") == 1  # pings never reach the caller
    assert kept_message == plain_message
    assert [block.type for block in kept_message.content] == ["text"]
    assert kept_message.stop_reason == "end_turn" and kept_message.usage.output_tokens == 2
