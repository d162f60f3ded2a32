"""Large bodies on every path that turns a body into a prompt: they must not stall the event
loop, multiply the server's memory, or grow with the square of their items.

A Responses input of 110,000 `function_call` items is read in time proportional to it, off
the event loop (`/health` answers meanwhile); eight concurrent 6.7 MiB `count_tokens` bodies
take turns by size (`localspec.server.admission`) and a text too long for the window is
counted and refused a piece at a time (`localspec.prompting`): the server's peak resident
memory (VmHWM, reset before each case) stays far below the 3.4 GB they once reached.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from localspec.messages import Message
from localspec.server import responses_input
from localspec.server.admission import WAITING_BODIES, BodyGate
from localspec.server.llamacpp_api import MAX_EXTRA_CHUNKS
from localspec.server.responses_input import conversation
from localspec.server.tokens_api import MOST_WITH_PIECES
from localspec.server.wire import ApiError, Fields
from tests.server.conftest import Server, start_server

HEALTH_GUARD_S = 5.0  # a hang guard: /health answered in milliseconds here, once in 7 s
MIB = 1 << 20
CALL = {"type": "function_call", "name": "f", "call_id": "c", "arguments": "{}"}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def big(server_env: None, qwen_models: tuple[Path, Path]) -> Iterator[Server]:
    running = start_server(qwen_models[0], None, "--ctx-size", "1024", "--max-tokens", "4")
    yield running
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)


def _peak_mib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) // 1024


def _reset_peak(server: Server) -> int:
    """Start a new peak (the kernel's clear_refs 5) at the current resident size."""
    Path(f"/proc/{server.process.pid}/clear_refs").write_text("5")
    return _peak_mib(server)


def _post(server: Server, path: str, body: bytes) -> httpx2.Response:
    with server.unix(timeout=600) as http:
        return http.post(path, content=body, headers={"content-type": "application/json"})


def test_function_calls_join_their_turn_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call once rebuilt the turn's tuple of calls: n calls copied n²/2 of them."""
    copied: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Message:
        copied.append(len(kwargs.get("tool_calls", ())))
        return Message(*args, **kwargs)

    monkeypatch.setattr(responses_input, "Message", counting)
    calls = 2000
    items = [{"role": "user", "content": "hi"}, *[CALL] * calls, {"role": "user", "content": "x"}]
    turns = conversation(Fields({"input": items}))
    assert [turn.role for turn in turns] == ["user", "assistant", "user"]
    assert len(turns[1].tool_calls) == calls
    assert sum(copied) <= 2 * calls


def test_an_input_of_reasoning_items_only_is_a_clear_400(big: Server) -> None:
    body = {"input": [{"type": "reasoning", "summary": []}]}
    reply = _post(big, "/v1/responses", json.dumps(body).encode())
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "input" and "only reasoning items" in error["message"]
    assert "template" not in error["message"]


def test_health_answers_while_a_huge_input_is_read(big: Server) -> None:
    with big.unix() as http:
        max_body = http.get("/props").json()["max_body"]
    calls = (max_body - 1024) // len(json.dumps(CALL).encode() + b", ")
    body = json.dumps({"input": [{"role": "user", "content": "hi"}, *[CALL] * calls]}).encode()
    assert len(body) <= max_body
    answered: list[httpx2.Response] = []
    sender = threading.Thread(target=lambda: answered.append(_post(big, "/v1/responses", body)))
    sender.start()
    polls = 0
    with big.unix(timeout=HEALTH_GUARD_S * 4) as http:
        while sender.is_alive():
            started = time.monotonic()
            assert http.get("/health").json()["status"] == "ok"
            assert time.monotonic() - started < HEALTH_GUARD_S
            polls += 1
    sender.join()
    assert polls > 0
    assert answered[0].status_code == 400, answered[0].text  # far longer than the window
    assert answered[0].json()["error"]["code"] == "context_length_exceeded"


HEALTH_SHARE = 0.5
"""The longest a /health may wait, as a share of the big request's own time: work held on the
event loop keeps one /health waiting for most of the request (four million ids to /detokenize
kept it 1.2 s while they were checked and joined there); off the loop it waits
milliseconds. A share, not seconds, so that a slower machine cannot fail it (the issue's 1 s
bound, asserted here before, failed CI once at 1.004 s)."""


TOOLS = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(150_000)]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/detokenize", b'{"tokens": [' + b",".join([b"1"] * 4_000_000) + b"]}", 200),
        ("/tokenize", json.dumps({"content": "x" * (7 * MIB)}).encode(), 200),
        # a grammar of 150,000 tools (58 MB) was written on the event loop, then refused
        ("/v1/chat/completions", json.dumps({"messages": HI, "tools": TOOLS}).encode(), 400),
    ],
    ids=["detokenize-4M-ids", "tokenize-7M-ids", "chat-150k-tools"],
)
def test_health_answers_while_millions_of_ids_are_read_or_written(
    big: Server, path: str, body: bytes, status: int
) -> None:
    answered: list[httpx2.Response] = []
    sent = time.monotonic()
    sender = threading.Thread(target=lambda: answered.append(_post(big, path, body)))
    sender.start()
    slowest = 0.0
    with big.unix(timeout=HEALTH_GUARD_S * 4) as http:
        while sender.is_alive():
            started = time.monotonic()
            assert http.get("/health").json()["status"] == "ok"
            slowest = max(slowest, time.monotonic() - started)
    sender.join()
    took = time.monotonic() - sent
    assert answered[0].status_code == status, answered[0].text
    assert slowest < HEALTH_SHARE * took, (slowest, took)


def test_concurrent_count_tokens_take_turns_within_bounded_memory(big: Server) -> None:
    text = "x" * int(6.7 * MIB)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    before = _reset_peak(big)
    answers: list[httpx2.Response] = []

    def send() -> None:
        answers.append(_post(big, "/v1/messages/count_tokens", body))

    senders = [threading.Thread(target=send) for _ in range(8)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    assert [answer.status_code for answer in answers] == [200] * 8, answers[0].text
    assert len({answer.json()["input_tokens"] for answer in answers}) == 1
    assert answers[0].json()["input_tokens"] >= len(text)  # one byte token a character
    assert _peak_mib(big) - before < 512, "eight bodies at once once peaked at 3.4 GB"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
        ("/v1/responses", {"input": "x"}),
        ("/completion", {"prompt": "x"}),
        ("/v1/completions", {"prompt": "x"}),
    ],
)
def test_a_prompt_far_over_the_window_is_refused_without_its_tokens(
    big: Server, path: str, body: dict[str, Any]
) -> None:
    """A 7 MiB text is ~7 million tokens (~450 MB in llama.cpp's tokenizer, a list of 7
    million ints): it is counted a piece at a time and refused."""
    text = "x" * (7 * MIB)
    raw = json.dumps(body).replace('"x"', json.dumps(text)).encode()
    before = _reset_peak(big)
    reply = _post(big, path, raw)
    assert reply.status_code == 400, reply.text
    assert "context window" in json.dumps(reply.json())
    assert _peak_mib(big) - before < 256, "a 7 MiB Messages request once peaked at 670 MB"


def test_tokenize_with_pieces_is_bounded_and_refused_without_its_tokens(big: Server) -> None:
    """An object a token: seven million of them would pass 1.5 GB. Past `MOST_WITH_PIECES`
    the text is counted a piece at a time and refused; the ids alone are still answered."""
    text = "x" * (7 * MIB)
    before = _reset_peak(big)
    reply = _post(big, "/tokenize", json.dumps({"content": text, "with_pieces": True}).encode())
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "too_many_tokens" and f"at most {MOST_WITH_PIECES}" in error["message"]
    assert _peak_mib(big) - before < 128
    fits = {"content": "x" * MOST_WITH_PIECES, "with_pieces": True}
    pieces = _post(big, "/tokenize", json.dumps(fits).encode()).json()["tokens"]
    assert len(pieces) == MOST_WITH_PIECES and pieces[0] == {"id": pieces[0]["id"], "piece": "x"}


def test_an_infill_far_over_the_window_is_refused_without_its_tokens(big: Server) -> None:
    """A 3.5 MB prefix and suffix were tokenized whole to be refused: 411 MB at peak."""
    half = "y" * (7 * MIB // 4)
    before = _reset_peak(big)
    body = {"input_prefix": half, "input_suffix": half, "n_predict": 4}
    reply = _post(big, "/infill", json.dumps(body).encode())
    assert reply.status_code == 400, reply.text
    assert "context window" in reply.json()["error"]["message"]
    assert _peak_mib(big) - before < 128


def test_input_extra_of_millions_of_chunks_is_a_400_naming_the_bound(big: Server) -> None:
    """2.7 million `{}` chunks in an 8 MiB body took 22 s and 550 MB, read on the event loop,
    for a prompt that holds a few of them."""
    chunks = b",".join([b"{}"] * 2_000_000)
    raw = b'{"input_prefix": "a", "input_suffix": "b", "input_extra": [' + chunks + b"]}"
    reply = _post(big, "/infill", raw)
    assert reply.status_code == 400, reply.text
    assert f"at most {MAX_EXTRA_CHUNKS}" in reply.json()["error"]["message"]
    assert reply.json()["error"]["param"] == "input_extra"
    at_the_bound = [{"filename": "a.py", "text": "b"}] * MAX_EXTRA_CHUNKS
    body = {"input_prefix": "a", "input_suffix": "b", "input_extra": at_the_bound, "n_predict": 1}
    assert _post(big, "/infill", json.dumps(body).encode()).status_code == 200


def test_a_body_waits_its_turn_and_a_flood_of_them_is_a_503() -> None:
    """The gate itself: the bodies in work add up to its capacity, in arrival order, and
    those waiting to a bounded number of bytes beyond which a request is told to retry."""

    async def scenario() -> list[str]:
        gate = BodyGate(100)
        order: list[str] = []
        first = await gate.enter(100)

        async def later(name: str, size: int) -> None:
            leave = await gate.enter(size)
            order.append(name)
            leave()

        waiting = [asyncio.ensure_future(later(f"w{i}", 100)) for i in range(WAITING_BODIES)]
        await asyncio.sleep(0)
        with pytest.raises(ApiError) as refused:
            await gate.enter(1)
        assert refused.value.status == 503 and "Retry-After" in refused.value.headers
        assert order == []  # none goes while the first holds the whole capacity
        first()
        await asyncio.gather(*waiting)
        assert gate.held == 0 and gate.waiting == 0
        return order

    assert asyncio.run(scenario()) == [f"w{i}" for i in range(WAITING_BODIES)]
