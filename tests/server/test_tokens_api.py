"""`/tokenize`, `/detokenize` and `/apply-template` as llama-server answers them, and the
engine step each streamed OpenAI chunk carries in its `localspec` object."""

from __future__ import annotations

import json

import pytest

from tests.server.conftest import Server, qwen_models, qwen_server
from tests.server.schemas import WEATHER
from tests.server.test_bad_input import refused

__all__ = ["qwen_models", "qwen_server"]

HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


def post(server: Server, path: str, body: dict[str, object]) -> dict[str, object]:
    with server.unix() as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


def tokens_of(server: Server, text: str, **options: object) -> list[int]:
    tokens = post(server, "/tokenize", {"content": text, **options})["tokens"]
    assert isinstance(tokens, list)
    return tokens


def test_tokenize_and_detokenize_round_trip(server: Server) -> None:
    text = "def add(a, b):\n    return a + b  # ünïcode 🙂"
    plain = tokens_of(server, text)
    assert plain and all(isinstance(t, int) for t in plain)
    assert post(server, "/detokenize", {"tokens": plain}) == {"content": text}
    # llama-server's default is no BOS; asked for, the model's BOS comes first (if it has one)
    special = tokens_of(server, text, add_special=True)
    assert special[len(special) - len(plain) :] == plain
    assert len(special) - len(plain) in (0, 1)


def test_with_pieces_gives_each_token_its_text(server: Server) -> None:
    pieces = post(server, "/tokenize", {"content": "hello world", "with_pieces": True})["tokens"]
    assert isinstance(pieces, list)
    assert [set(p) for p in pieces] == [{"id", "piece"}] * len(pieces)
    assert [p["id"] for p in pieces] == tokens_of(server, "hello world")
    assert "".join(p["piece"] for p in pieces) == "hello world"


def test_apply_template_then_tokenize_counts_the_chat_prompt(server: Server) -> None:
    """The count a remote app shows before a turn is the prompt the chat endpoint runs."""
    prompt = post(server, "/apply-template", {"messages": HI})["prompt"]
    assert isinstance(prompt, str) and "Say hi" in prompt and "Be brief." in prompt
    counted = len(tokens_of(server, prompt, add_special=True))
    answer = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 1})
    usage = answer["usage"]
    assert isinstance(usage, dict)
    assert counted == usage["prompt_tokens"]


def test_apply_template_renders_the_tools_as_the_chat_prompt_does(qwen_server: Server) -> None:
    """With tools too (an agent counting its prompt): they are part of the chat's prompt."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    body = {"messages": HI, "tools": tools}
    prompt = post(qwen_server, "/apply-template", body)["prompt"]
    assert isinstance(prompt, str) and "get_weather" in prompt
    counted = len(tokens_of(qwen_server, prompt, add_special=True))
    answer = post(qwen_server, "/v1/chat/completions", {**body, "max_tokens": 1})
    usage = answer["usage"]
    assert isinstance(usage, dict)
    assert counted == usage["prompt_tokens"]
    bad = {"messages": HI, "tools": [{"type": "function"}]}
    assert "tools" in str(refused(qwen_server, "/apply-template", json.dumps(bad).encode()))


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/tokenize", {}, "'content' must be a string"),
        ("/tokenize", {"content": 5}, "'content' must be a string"),
        ("/tokenize", {"content": "x", "add_special": "yes"}, "'add_special'"),
        ("/tokenize", {"content": "x", "with_pieces": 1}, "'with_pieces'"),
        ("/detokenize", {}, "'tokens' must be a list of token ids"),
        ("/detokenize", {"tokens": "12"}, "'tokens' must be a list of token ids"),
        ("/detokenize", {"tokens": [1, True]}, "'tokens' must be a list of token ids"),
        ("/detokenize", {"tokens": [1, 2.5]}, "'tokens' must be a list of token ids"),
        ("/detokenize", {"tokens": [-1]}, "token ids must be in [0, "),
        ("/detokenize", {"tokens": [2**31]}, "token ids must be in [0, "),
        ("/apply-template", {}, "'messages' must be a non-empty list"),
        ("/apply-template", {"messages": [{"role": "robot", "content": "x"}]}, "role"),
        ("/apply-template", {"messages": [{"role": "user", "content": 3}]}, "content"),
    ],
)
def test_hostile_bodies_are_400s_naming_the_field(
    server: Server, path: str, body: dict[str, object], words: str
) -> None:
    error = refused(server, path, json.dumps(body).encode())
    assert words in str(error["message"])


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/apply-template"])
def test_over_tcp_they_need_the_token(server: Server, path: str) -> None:
    with server.tcp(auth=False) as http:
        assert http.post(path, json={"content": "x"}).status_code == 401


def test_each_streamed_chunk_carries_its_engine_step(server: Server) -> None:
    """With the exact draft every drafted token is accepted; the steps add up to the
    statistics of the last chunk, and every step's tokens are there (none held back)."""
    body = {
        "messages": HI,
        "max_tokens": 24,
        "stream": True,
        "spec": {"mode": "draft", "draft_max": 3},
        "stream_options": {"include_usage": True},
    }
    with server.unix() as http:
        raw = http.post("/v1/chat/completions", json=body).text
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    pieces = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"] is None]
    steps = [e["localspec"] for e in pieces if "localspec" in e]  # all but the role's chunk
    assert len(steps) == len(pieces) - 1
    final = next(
        e["localspec"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]
    )
    assert sum(len(s["tokens"]) for s in steps) == final["generated_tokens"]
    assert sum(s["drafted"] for s in steps) == final["drafted"] > 0
    assert sum(s["from_draft"] for s in steps) == final["accepted"] == final["drafted"]
    assert {s["source"] for s in steps if s["drafted"]} == {"draft"}
    assert sum(1 for s in steps if s["tokens"]) == final["target_steps"]
