"""A chat streaming while three clients send `/infill` back to back, on a real server.

Editors' requests go first, within a bound (`localspec.server.worker`'s `EDITOR_BOUND_S`):
a request they keep from progress that long gets a step before the next editor's. Three
clients flooding `/infill` once kept a chat silent for 9-22 s; without the bound, a flood that
never lets the queue run dry keeps it silent until the flood stops. Here the flood stops only
when the chat's stream has ended (or at a hang guard), so a chat that finishes while every
flooding client is still sending is one the flood did not starve. The test asserts that and
the order of what arrived, never how fast.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import Server, start_server

FLOOD_GUARD_S = 120.0
"""A hang guard: how long the flood goes on if the chat never ends."""
CLIENTS = 3
CHAT_TOKENS = 6
INFILL_TOKENS = 256
"""Long enough that the server is never without an infill to run while the chat streams: with
48, on a loaded machine the three clients were once all between requests at the same moment
(their own threads slow to send the next), and the chat's steps ran in that lull, one after
another, which the order check below read as a chat served after the flood."""
CHAT = {
    "messages": [{"role": "user", "content": "Write a parser."}],
    "max_tokens": CHAT_TOKENS,
    "ignore_eos": True,
    "temperature": 0,
    "stream": True,
}


@pytest.fixture(scope="module")
def flooded(server_env: None, tiny_target: Path) -> Iterator[Server]:
    """Plain decoding: each of the chat's steps is one token, one chunk."""
    running = start_server(tiny_target, None, "--ctx-size", "2048", "--spec", "off")
    yield running
    assert running.stop() == 0


class Flood:
    """`CLIENTS` threads, each sending `/infill` as soon as its last one was answered, until
    `stop` (or the hang guard); `arrivals` is shared with the chat, in the order things came."""

    def __init__(self, server: Server, arrivals: list[str], lock: threading.Lock) -> None:
        self.server, self.arrivals, self.lock = server, arrivals, lock
        self.stop = threading.Event()
        self.answered = [0] * CLIENTS
        self.statuses: set[int] = set()
        self.stopped = [False] * CLIENTS
        self.threads = [threading.Thread(target=self._send, args=(i,)) for i in range(CLIENTS)]

    def _send(self, client: int) -> None:
        deadline = time.monotonic() + FLOOD_GUARD_S
        with self.server.unix(timeout=FLOOD_GUARD_S) as http:
            while not self.stop.is_set() and time.monotonic() < deadline:
                sent = self.answered[client]
                body = {
                    "input_prefix": f"# client {client}, request {sent}\nclass Stack:\n",
                    "input_suffix": "\n",
                    "n_predict": INFILL_TOKENS,
                    "ignore_eos": True,
                }
                status = http.post("/infill", json=body).status_code
                with self.lock:
                    self.statuses.add(status)
                    self.arrivals.append("infill")
                self.answered[client] += 1
        self.stopped[client] = True

    def flowing(self) -> bool:
        """Whether every client has had two answers (so each is sending back to back)."""
        return min(self.answered) >= 2 or any(self.stopped)


def test_a_chat_streams_to_its_end_while_three_clients_flood_infill(flooded: Server) -> None:
    arrivals: list[str] = []  # "chat" a chunk with text, "infill" an answer, "end" the chat's
    lock = threading.Lock()
    flood = Flood(flooded, arrivals, lock)
    for thread in flood.threads:
        thread.start()
    try:
        while not flood.flowing():
            time.sleep(0.01)
        stopped_before_the_end = _stream_chat(flooded, arrivals, lock, flood)
    finally:
        flood.stop.set()
        for thread in flood.threads:
            thread.join(FLOOD_GUARD_S)
    assert flood.statuses == {200}
    assert not stopped_before_the_end, "the chat ended only after the flood stopped"
    chat = [i for i, what in enumerate(arrivals) if what == "chat"]
    assert len(chat) >= 2
    during = arrivals[chat[0] : chat[-1]]
    # the flood ran between the chat's chunks: the chat was answered during it, not after it
    assert during.count("infill") >= 1, arrivals


def _stream_chat(server: Server, arrivals: list[str], lock: threading.Lock, flood: Flood) -> bool:
    """Stream the chat, noting each chunk with text; returns whether any flooding client had
    stopped (its hang guard) by the time the stream ended."""
    with (
        server.unix(timeout=FLOOD_GUARD_S) as http,
        http.stream("POST", "/v1/chat/completions", json=CHAT) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line.removeprefix("data: "))["choices"]
            if choices and choices[0]["delta"].get("content"):
                with lock:
                    arrivals.append("chat")
    with lock:
        arrivals.append("end")
        return any(flood.stopped)
