"""llama-server's `samplers` field over a real socket: the chain is applied, not ignored, on
/completion, /infill and the OpenAI endpoints; a chain localspec cannot apply is a 400."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import Server
from tests.server.test_behaviour import error_of
from tests.server.test_llamacpp_api import LLAMA_VIM_FIELDS

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
# spec off: the same seed then draws the same tokens whatever the tuner learned before
SEEDED = {"seed": 7, "spec": "off", "ignore_eos": True}


def answer(server: Server, path: str, **fields: Any) -> str:
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    elif path == "/v1/completions":
        body = {"prompt": PROMPT, "max_tokens": 8}
    else:
        body = {"prompt": PROMPT, "n_predict": 8}
    with server.unix() as http:
        response = http.post(path, json={**body, **SEEDED, **fields})
    assert response.status_code == 200, response.text
    reply = response.json()
    if path == "/v1/chat/completions":
        return str(reply["choices"][0]["message"]["content"])
    if path == "/v1/completions":
        return str(reply["choices"][0]["text"])
    return str(reply["content"])


PATHS = ["/completion", "/infill", "/v1/completions", "/v1/chat/completions"]


@pytest.mark.parametrize("path", PATHS)
def test_without_a_temperature_stage_the_draw_is_at_temperature_1(
    server: Server, path: str
) -> None:
    at_one = answer(server, path, samplers=["temperature"], temperature=1.0)
    assert answer(server, path, samplers=[], temperature=0.0) == at_one
    assert answer(server, path, samplers="kt", top_k=0, temperature=1.0) == at_one
    # the same request without samplers is greedy: the field is what made it sample
    greedy = answer(server, path, temperature=0.0)
    assert greedy != at_one
    assert answer(server, path, samplers=["top_k", "temperature"], top_k=1) == greedy


def test_llama_vims_completion_chain_is_applied(server: Server) -> None:
    """top_k 40, top_p .9, infill and no temperature, as llama-server samples it: on the tiny
    model 3 * p(EOG) * 40 candidates outweighs the text, so infill ends the completion."""
    fields = ["content", "stop_type"]
    body = {**LLAMA_VIM_FIELDS, "seed": 3, "spec": "off", "response_fields": fields}
    without = {k: v for k, v in body.items() if k != "samplers"}
    with server.unix() as http:
        ended = http.post("/infill", json=body).json()
        greedy = http.post("/infill", json=without).json()  # the server's default: greedy
        fewer = [http.post("/infill", json={**body, "top_k": 5}).json() for _ in range(2)]
        warm = http.post("/infill", json={**body, "n_predict": 0, "samplers": []})
    assert ended == {"content": "", "stop_type": "eos"}
    assert greedy["content"] != ""
    # with five candidates the text outweighs the end; the seed makes the draw repeatable
    assert fewer[0] == fewer[1] and fewer[0]["content"] != ""
    assert warm.status_code == 200 and warm.json()["content"] == ""


NAMES = "penalties, top_k, top_p, min_p, temperature, infill"
LETTERS = "e (penalties), k (top_k), p (top_p), m (min_p), t (temperature), i (infill)"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("samplers", "says", "lists"),
    [
        (["top_k", "dry"], "'dry'", NAMES),
        (["xtc"], "'xtc'", NAMES),
        (["warp"], "'warp'", NAMES),
        ("kq", "'q'", LETTERS),
        (5, "a list of sampler names", ""),
        (["top_k", 3], "a list of sampler names", ""),
        # each stage runs at every step: seven million letters held four tokens for 87 s
        ("k" * 1_000_000, "a chain of 1000000 sampler stages: at most 32", "each stage once"),
        (["top_k"] * 33, "a chain of 33 sampler stages: at most 32", "each stage once"),
    ],
)
def test_a_chain_localspec_cannot_apply_is_a_400(
    server: Server, path: str, samplers: object, says: str, lists: str
) -> None:
    body = {"prompt": PROMPT, "messages": [{"role": "user", "content": "x"}], "samplers": samplers}
    with server.unix() as http:
        response = http.post(path, json={**body, "n_predict": 1, "max_tokens": 1})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == "samplers"
    message = str(error["message"])
    assert message.startswith("'samplers' ") and says in message and lists in message
