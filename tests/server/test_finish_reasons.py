"""A full context and max_tokens both read "length" on OpenAI's wire; `localspec.stop` (and
llama.cpp's `truncated`) tell them apart, so a chat client can say "context full"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, start_server

N_CTX = 256  # llama.cpp's smallest (it rounds a context up to a multiple of 256)
FILL = {"max_tokens": 100_000, "ignore_eos": True}  # more than any context holds


@pytest.fixture(scope="module")
def small(server_env: None, tiny_target: Path) -> Iterator[Server]:
    """A small context: filling it takes a moment whatever the machine."""
    running = start_server(tiny_target, None, "--ctx-size", str(N_CTX), "--spec", "off")
    yield running
    assert running.stop() == 0


def events(server: Server, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with (
        server.unix() as http,
        http.stream("POST", path, json={**body, "stream": True}) as response,
    ):
        assert response.status_code == 200
        data = [
            line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")
        ]
    return [json.loads(item) for item in data if item != "[DONE]"]


def chat(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], **fields}


def test_chat_that_fills_the_context(small: Server) -> None:
    with small.unix() as http:
        answer = http.post("/v1/chat/completions", json=chat(**FILL)).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["localspec"]["stop"] == "context"
    assert answer["usage"]["total_tokens"] >= N_CTX  # the last token needs no room


def test_streamed_chat_that_fills_the_context(small: Server) -> None:
    final = events(small, "/v1/chat/completions", chat(**FILL))[-1]
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["localspec"]["stop"] == "context"


@pytest.mark.parametrize("stream", [False, True])
def test_completion_that_fills_the_context_is_a_truncated_limit(
    small: Server, stream: bool
) -> None:
    """llama-server's words for it: `stop_type` "limit" with `truncated` true."""
    body = {"prompt": "once", "n_predict": -1, "ignore_eos": True}
    if stream:
        final = events(small, "/completion", body)[-1]
    else:
        with small.unix() as http:
            final = http.post("/completion", json=body).json()
    assert final["stop_type"] == "limit"
    assert final["truncated"] is True
    assert final["localspec"]["stop"] == "context"
    assert final["tokens_cached"] >= N_CTX


def test_max_tokens_is_length_not_context(small: Server) -> None:
    with small.unix() as http:
        answer = http.post("/v1/chat/completions", json=chat(max_tokens=3, ignore_eos=True))
        completion = http.post(
            "/completion", json={"prompt": "a", "n_predict": 3, "ignore_eos": True}
        )
    assert answer.json()["choices"][0]["finish_reason"] == "length"
    assert answer.json()["localspec"]["stop"] == "length"
    assert completion.json()["stop_type"] == "limit"
    assert completion.json()["truncated"] is False
    assert completion.json()["localspec"]["stop"] == "length"
    final = events(small, "/v1/chat/completions", chat(max_tokens=3, ignore_eos=True))[-1]
    assert final["localspec"]["stop"] == "length"
