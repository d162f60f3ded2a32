"""`/slots`, `/props`' `total_slots` and a slot's cache kept while another slot runs, over a
real socket to tiny-model servers with three slots (the default) and with one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, start_server

CHAT_PROMPT = "def parse(text):\n    lines = text.splitlines()\n    result = {}\n" * 4
INFILL = {"input_prefix": "class Stack:\n", "input_suffix": "\n", "prompt": "    def "}


def _post(server: Server, path: str, body: dict[str, Any]) -> Any:
    with server.unix() as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _get(server: Server, path: str) -> Any:
    with server.unix() as http:
        response = http.get(path)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def single(server_env: None, tiny_target: Path) -> Iterator[Server]:
    running = start_server(tiny_target, None, "--ctx-size", "1024", "--parallel", "1")
    yield running
    assert running.stop() == 0


def test_slots_and_props_tell_the_slot_count(server: Server, single: Server) -> None:
    assert _get(server, "/props")["total_slots"] == 3
    slots = _get(server, "/slots")
    assert [slot["id"] for slot in slots] == [0, 1, 2]
    assert all(slot["n_ctx"] == 1024 and slot["is_processing"] is False for slot in slots)
    assert _get(single, "/props")["total_slots"] == 1
    assert [slot["id"] for slot in _get(single, "/slots")] == [0]
    assert _get(server, "/health")["slots"] == 3


def test_a_slot_keeps_its_cache_while_another_runs(server: Server) -> None:
    body = {"prompt": CHAT_PROMPT, "n_predict": 4, "temperature": 0.0, "id_slot": 1}
    first = _post(server, "/completion", body)
    assert first["id_slot"] == 1
    _post(server, "/infill", {**INFILL, "n_predict": 4, "id_slot": 2})  # another slot runs
    longer = {**body, "prompt": CHAT_PROMPT + "    for line in lines:\n", "id_slot": -1}
    second = _post(server, "/completion", longer)
    assert second["id_slot"] == 1  # the slot with the longest common prefix
    prompt_tokens = first["timings"]["prompt_n"] + first["timings"]["cache_n"]
    assert second["timings"]["cache_n"] >= prompt_tokens - 1
    slots = {slot["id"]: slot for slot in _get(server, "/slots")}
    assert slots[1]["n_cached"] >= prompt_tokens and slots[2]["n_cached"] > 0
    # the slots that hold something and are not in the KV cache wait in host memory
    waiting = [slot for slot in slots.values() if slot["saved_bytes"] > 0]
    assert len(waiting) >= 1 and all(slot["n_cached"] > 0 for slot in waiting)


def test_one_slot_serves_every_request(single: Server) -> None:
    for asked in (-1, 0, 5):
        answer = _post(single, "/infill", {**INFILL, "n_predict": 2, "id_slot": asked})
        assert answer["id_slot"] == 0


def test_a_bad_parallel_is_refused_at_startup(server_env: None, tiny_target: Path) -> None:
    with pytest.raises(RuntimeError, match="--parallel"):
        start_server(tiny_target, None, "--parallel", "0")
