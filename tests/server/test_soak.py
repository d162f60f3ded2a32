"""200 requests of mixed endpoints, cancelled streams and bad bodies leave the server's
memory where it was: its resident set stays within 5% of the level after a warm-up of twice
as many (in one of up to three rounds: a leak grows in each)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest

from tests.server.conftest import Server, start_server, wait_until_idle

REQUESTS = 200
# The first couple of hundred requests still grow the resident set by up to ~11% once (the
# allocator's arenas each keep a 9 MiB body's pages, and more threads meet one), then it stays:
# 113.6, 113.6, 113.7 MiB after each further 200 here. A leak grows in every round; the warm-up
# is long enough that the measured round is a steady one (after 200, one run of three still
# grew 3%; after 400: +0.05%, +0.05%, -9.8%).
WARM_UP_REQUESTS = 400
GROWTH_ALLOWED = 0.05
ROUNDS = 3
LONG = {"prompt": "once", "n_predict": -1, "ignore_eos": True, "stream": True}


@pytest.fixture(scope="module")
def soaked(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    running = start_server(tiny_target, tiny_draft_exact, "--ctx-size", "8192", auth=False)
    yield running
    assert running.stop() == 0


def resident_kib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1])


def chat(http: httpx2.Client) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    assert http.post("/v1/chat/completions", json=body).status_code == 200


def streamed_chat(http: httpx2.Client) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert "data: [DONE]" in list(response.iter_lines())


def legacy(http: httpx2.Client) -> None:
    body = {"prompt": "def f(", "max_tokens": 16}
    assert http.post("/v1/completions", json=body).status_code == 200


def infill(http: httpx2.Client) -> None:
    body = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n", "n_predict": 16}
    assert http.post("/infill", json=body).status_code == 200


def warm_cache(http: httpx2.Client) -> None:
    body = {"input_extra": [{"filename": "a.py", "text": "import os\n" * 20}], "n_predict": 0}
    assert http.post("/infill", json=body).status_code == 200


def cancelled_stream(http: httpx2.Client) -> None:
    """A client that leaves mid-stream. The context (8192) is far more than the tiny model
    generates before the server notices, on any machine: each one is a cancellation."""
    with http.stream("POST", "/completion", json=LONG) as response:
        lines = response.iter_lines()
        assert [next(lines) for _ in range(4)]


def bad_body(body: bytes, status: int = 400) -> Callable[[httpx2.Client], None]:
    def send(http: httpx2.Client) -> None:
        assert http.post("/v1/chat/completions", content=body).status_code == status

    return send


KINDS: list[Callable[[httpx2.Client], None]] = [
    chat,
    streamed_chat,
    legacy,
    infill,
    warm_cache,
    cancelled_stream,
    bad_body(b"[" * 100_000 + b"]" * 100_000),
    bad_body(b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    bad_body(b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e22}'),
    bad_body(b"{not json"),
    bad_body(b"x" * (9 * 1024 * 1024), status=413),  # over the default limit at 8192 tokens
    cancelled_stream,
]


def run(server: Server, count: int) -> int:
    """`count` requests cycling through KINDS, each on a fresh connection; returns how many
    were cancelled streams."""
    cancelled = 0
    for kind in itertools.islice(itertools.cycle(KINDS), count):
        with server.unix() as http:
            kind(http)
        cancelled += kind is cancelled_stream
    return cancelled


def test_memory_stays_flat_over_200_mixed_requests(soaked: Server) -> None:
    """A round of REQUESTS after the warm-up stays within GROWTH_ALLOWED; a round that grew
    more is followed by another, up to ROUNDS: a leak grows in every round, while the
    allocator's one-off step (more arenas meeting a 9 MiB body when a loaded machine lets
    more requests overlap: +9% once seen in CI's run beside other work) happens once."""
    run(soaked, WARM_UP_REQUESTS)
    wait_until_idle(soaked)
    with soaked.unix() as http:
        before_cancelled = http.get("/health").json()["cancelled"]
    cancelled = 0
    rounds: list[tuple[int, int]] = []
    while len(rounds) < ROUNDS and (not rounds or growth(*rounds[-1]) > GROWTH_ALLOWED):
        start = resident_kib(soaked)
        cancelled += run(soaked, REQUESTS)
        wait_until_idle(soaked)
        rounds.append((start, resident_kib(soaked)))
        print(f"\nRSS {start} -> {rounds[-1][1]} KiB ({growth(*rounds[-1]):+.2%}), {REQUESTS}")

    with soaked.unix() as http:
        health = http.get("/health").json()
        assert http.get("/props").json()["max_body"] < 9 * 1024 * 1024
        chat(http)
    assert health["cancelled"] == before_cancelled + cancelled
    assert growth(*rounds[-1]) <= GROWTH_ALLOWED, json.dumps({"rounds_kib": rounds})


def growth(start_kib: int, end_kib: int) -> float:
    return (end_kib - start_kib) / start_kib
