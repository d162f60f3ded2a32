"""A server over a pair whose vocabularies are padded apart (the target lists more ids than
its draft, as Qwen2.5-Coder 7B beside its 0.5B draft): it drafts with the draft model, and a
client's token ids that the draft lacks are answered by the target alone, never a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, start_server
from tests.tiny_models import N_VOCAB, TinySpec, write_tiny_model

PADDING = 8


@pytest.fixture(scope="module")
def padded(server_env: None, tiny_models_dir: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    spec = TinySpec(padding=PADDING)
    target = write_tiny_model(tiny_models_dir / "target-padded-server.gguf", spec)
    running = start_server(target, tiny_draft_exact, "--ctx-size", "1024")
    yield running
    assert running.stop() == 0


def _complete(server: Server, prompt: list[int], mode: str) -> dict[str, Any]:
    spec = {"mode": mode, "p_min": 0.0} if mode in ("draft", "hybrid") else mode
    body = {"prompt": prompt, "n_predict": 16, "temperature": 0, "spec": spec}
    with server.unix() as http:
        response = http.post("/completion", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _tokens(server: Server, text: str) -> list[int]:
    with server.unix() as http:
        response = http.post("/tokenize", json={"content": text})
    assert response.status_code == 200, response.text
    tokens: list[int] = response.json()["tokens"]
    return tokens


def test_the_draft_model_drafts_for_a_target_padded_further(padded: Server) -> None:
    prompt = _tokens(padded, "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    plain = _complete(padded, prompt, "off")
    drafted = _complete(padded, prompt, "draft")
    assert drafted["content"] == plain["content"]
    assert drafted["timings"]["draft_n"] > 0 and drafted["timings"]["draft_n_accepted"] > 0


@pytest.mark.parametrize("spec", ["draft", "hybrid", "auto"])
def test_token_ids_the_draft_lacks_are_answered_by_the_target_alone(
    padded: Server, spec: str
) -> None:
    prompt = [*range(100, 120), N_VOCAB + 3, *range(120, 140)]
    plain = _complete(padded, prompt, "off")
    answer = _complete(padded, prompt, spec)
    assert answer["content"] == plain["content"]
    with padded.unix() as http:
        assert http.get("/health").json()["status"] == "ok"  # the server is none the worse


def test_an_id_beyond_the_target_is_still_refused(padded: Server) -> None:
    with padded.unix() as http:
        response = http.post("/completion", json={"prompt": [1, N_VOCAB + PADDING], "n_predict": 2})
    assert response.status_code == 400
    assert f"[0, {N_VOCAB + PADDING})" in response.json()["error"]["message"]
