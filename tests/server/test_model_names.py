"""Model names: any name is served by default (agents send the names they were configured
with), `--model-alias` adds names `/v1/models` lists, `--strict-model-names` refuses others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import Server, server_env, start_server

__all__ = ["server_env"]

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def strict(server_env: None, tiny_target: Path) -> Iterator[Server]:
    running = start_server(
        tiny_target,
        None,
        "--model-alias",
        "qwen2.5-coder:1.5b",
        "--model-alias",
        "gpt-4o",
        "--strict-model-names",
        "--spec",
        "off",
    )
    yield running
    assert running.stop() == 0


def test_aliases_are_listed(strict: Server) -> None:
    with strict.unix() as http:
        listed = [model["id"] for model in http.get("/v1/models").json()["data"]]
    assert listed == ["target", "qwen2.5-coder:1.5b", "gpt-4o"]


@pytest.mark.parametrize("name", ["target", "qwen2.5-coder:1.5b", "gpt-4o", "target.gguf"])
def test_strict_serves_its_names(strict: Server, name: str) -> None:
    with strict.unix() as http:
        answer = http.post("/v1/chat/completions", json={**CHAT, "model": name})
    assert answer.status_code == 200, answer.text


def test_strict_refuses_other_names_on_every_api(strict: Server) -> None:
    bodies = {
        "/v1/chat/completions": CHAT,
        "/v1/messages": CHAT,
        "/v1/responses": {"input": "hi", "max_output_tokens": 1},
    }
    with strict.unix() as http:
        for path, body in bodies.items():
            answer = http.post(path, json={**body, "model": "claude-opus-4"})
            assert answer.status_code == 404, path
            assert "--model-alias claude-opus-4" in answer.text


def test_any_name_is_served_by_default(server_env: None, tiny_target: Path) -> None:
    running = start_server(tiny_target, None, "--spec", "off")
    try:
        with running.unix() as http:
            answer = http.post("/v1/chat/completions", json={**CHAT, "model": "claude-opus-4"})
            listed = [model["id"] for model in http.get("/v1/models").json()["data"]]
        assert answer.status_code == 200
        assert listed == ["target"]
    finally:
        assert running.stop() == 0
