"""Random bodies on every endpoint that takes one: right and wrong shapes, deep nesting, odd
unicode (lone surrogates too), huge numbers. Every answer is JSON with a 2xx or 4xx status
(a stream's events too), the server's log holds no traceback, and it answers afterwards.

Derandomized with a bounded number of examples, so a run is the same on every machine;
generation lengths in right-shaped bodies are small, and `--max-tokens` caps the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import Server, start_server

ENDPOINTS = [
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completion",
    "/completions",
    "/infill",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
]
FUZZ = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SPECIAL = ["<|im_end|>", "<|fim_middle|>", "<|endoftext|>", "\x00", "", "🙂", "\n\n"]
SURROGATES = ["\ud800", "a\udfffb", "\udbff\udbff", "x\ud83d"]
HUGE = [10**22, -(10**22), 2**31, 2**31 - 1, 2**63, 2**64, -2, 10**300, 10**400, -(10**400)]

# text a client may rightly send (any Unicode), and text no tokenizer can encode
plain = st.one_of(st.text(st.characters(codec="utf-8"), max_size=12), st.sampled_from(SPECIAL))
odd = st.one_of(st.text(st.characters(), max_size=12), st.sampled_from(SURROGATES))
number = st.one_of(
    st.integers(-3, 3),
    st.integers(-(2**80), 2**80),
    st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True),
)
anything = st.recursive(
    st.one_of(st.none(), st.booleans(), number, plain, odd),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd, inner, max_size=3),
    max_leaves=8,
)


def deep(levels: int) -> Any:
    """Arrays and objects nested `levels` deep, as a value in a body."""
    value: Any = 0
    for level in range(levels):
        value = [value] if level % 2 else {"a": value}
    return value


def very_deep(levels: int) -> bytes:
    """A body nested deeper than any JSON encoder (or the server's parser) recurses."""
    return b'{"a": ' + b"[" * levels + b"]" * levels + b"}"


wrong = st.one_of(anything, st.sampled_from(HUGE), st.integers(1, 200).map(deep))

# right values only; lengths stay short so that generating stays quick
short = st.integers(1, 6)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "developer", "user", "assistant"]),
        "content": st.one_of(
            plain,
            st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": plain}), max_size=2),
        ),
    }
)
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": plain})
anthropic_turn = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.one_of(plain, st.lists(text_block, max_size=2)),
    }
)
responses_item = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "developer"]),
        "content": st.one_of(
            plain, st.lists(st.fixed_dictionaries({"type": st.just("input_text"), "text": plain}))
        ),
    }
)
common = {
    "temperature": st.floats(0, 2),
    "top_k": st.integers(0, 50),
    "top_p": st.floats(0.01, 1),
    "min_p": st.floats(0, 0.5),
    "seed": st.integers(-1, 2**40),
    "stop": st.one_of(plain, st.lists(plain, max_size=3)),
    "stream": st.booleans(),
    "ignore_eos": st.booleans(),
    "spec": st.one_of(
        st.sampled_from(["off", "ngram", "draft", "hybrid", "auto"]),
        st.fixed_dictionaries(
            {"mode": st.sampled_from(["ngram", "draft"])},
            optional={"draft_max": st.integers(0, 8), "p_min": st.floats(0, 0.99)},
        ),
    ),
}
SHAPES = {
    "chat": st.fixed_dictionaries(
        {"messages": st.lists(message, min_size=1, max_size=3)},
        optional={
            **common,
            "max_tokens": short,
            "max_completion_tokens": short,
            "model": st.sampled_from(["target", "default"]),
            "n": st.just(1),
            "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
            "response_format": st.just({"type": "text"}),
        },
    ),
    "openai completion": st.fixed_dictionaries(
        {"prompt": st.one_of(plain, st.lists(st.integers(0, 255), min_size=1, max_size=5))},
        optional={**common, "max_tokens": short, "suffix": plain, "echo": st.just(False)},
    ),
    "llama.cpp": st.fixed_dictionaries(
        {
            "n_predict": st.one_of(short, st.just(0)),
            "prompt": st.one_of(plain, st.lists(st.integers(0, 255), min_size=1, max_size=5)),
        },
        optional={
            **common,
            "input_prefix": plain,
            "input_suffix": plain,
            "input_extra": st.lists(
                st.fixed_dictionaries({"filename": plain, "text": plain}), max_size=2
            ),
            "n_indent": st.integers(0, 8),
            "t_max_predict_ms": st.integers(0, 1000),
            "response_fields": st.lists(st.sampled_from(["content", "timings/prompt_n"])),
        },
    ),
    "tokenize": st.fixed_dictionaries(
        {"content": plain},
        optional={
            "add_special": st.booleans(),
            "parse_special": st.booleans(),
            "with_pieces": st.booleans(),
        },
    ),
    "detokenize": st.fixed_dictionaries({"tokens": st.lists(st.integers(-2, 300), max_size=6)}),
    "apply-template": st.fixed_dictionaries(
        {"messages": st.lists(message, min_size=1, max_size=3)}
    ),
    "messages": st.fixed_dictionaries(
        {"max_tokens": short, "messages": st.lists(anthropic_turn, min_size=1, max_size=3)},
        optional={
            **common,
            "model": st.sampled_from(["claude-sonnet-4-5", "target"]),
            "system": st.one_of(plain, st.lists(text_block, max_size=2)),
            "stop_sequences": st.lists(plain, max_size=3),
            "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "none"}]),
            "thinking": st.just({"type": "adaptive"}),
        },
    ),
    "responses": st.fixed_dictionaries(
        {"input": st.one_of(plain, st.lists(responses_item, min_size=1, max_size=3))},
        optional={
            **common,
            "max_output_tokens": short,
            "instructions": plain,
            "previous_response_id": st.sampled_from(["resp_unknown", ""]),
            "store": st.booleans(),
            "text": st.just({"format": {"type": "text"}}),
        },
    ),
}
SHAPE_OF = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "openai completion",
    "/completion": "llama.cpp",
    "/completions": "llama.cpp",
    "/infill": "llama.cpp",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
    "/apply-template": "apply-template",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/responses": "responses",
}


def encoded(value: Any, ascii_only: bool) -> bytes:
    """JSON as a client might send it: escaped ASCII, or UTF-8 where a surrogate is written
    raw (which makes the bytes invalid UTF-8: a parse error, not a crash)."""
    raw = json.dumps(value, ensure_ascii=ascii_only)
    return raw.encode("utf-8", "surrogatepass")


def mutated(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    return {**body, field: value}


FIELDS = sorted(
    {*common, "messages", "prompt", "max_tokens", "n_predict", "input_extra", "spec", "content"}
    | {"tokens", "add_special", "with_pieces", "input", "system", "max_output_tokens", "tools"}
)


def bodies(path: str) -> st.SearchStrategy[bytes]:
    """Right-shaped bodies (which mostly generate), right ones with a field gone wrong, any
    JSON object, any JSON value, very deep nesting, and bytes that are no JSON at all."""
    right = SHAPES[SHAPE_OF[path]]
    one_wrong = st.builds(mutated, right, st.sampled_from(FIELDS), wrong)
    return st.one_of(
        st.builds(encoded, right, st.booleans()),
        st.builds(encoded, right, st.booleans()),
        st.builds(encoded, one_wrong, st.booleans()),
        st.builds(encoded, one_wrong, st.booleans()),
        st.builds(encoded, st.dictionaries(odd, anything, max_size=4), st.booleans()),
        st.builds(encoded, wrong, st.just(True)),
        st.integers(60, 100_000).map(very_deep),
        st.binary(max_size=40),
    )


@pytest.fixture(scope="module")
def fuzzed(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    """A server whose default length is short: bodies that leave it out stay quick."""
    running = start_server(
        tiny_target, tiny_draft_exact, "--ctx-size", "256", "--max-tokens", "8", auth=False
    )
    yield running
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)


def check_answer(server: Server, path: str, body: bytes) -> None:
    with (
        server.unix() as http,
        http.stream(
            "POST", path, content=body, headers={"Content-Type": "application/json"}
        ) as response,
    ):
        raw = response.read()
    assert response.status_code < 500, raw
    assert 200 <= response.status_code < 300 or "error" in json.loads(raw)
    if response.headers["content-type"].startswith("text/event-stream"):
        lines = [line for line in raw.decode().splitlines() if line.startswith("data: ")]
        events = [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]
        assert events
        kinds = [event.get("error", {}).get("type") for event in events]
        assert not {"server_error", "api_error"} & set(kinds)  # OpenAI's and Anthropic's 5xx
    else:
        json.loads(raw)


@pytest.mark.parametrize("path", ENDPOINTS)
def test_random_bodies_get_json_2xx_or_4xx(fuzzed: Server, path: str) -> None:
    @FUZZ
    @given(bodies(path))
    def one(body: bytes) -> None:
        check_answer(fuzzed, path, body)

    one()
    with fuzzed.unix() as http:
        real = http.post(path, json=_real_request(path))
        assert real.status_code == 200, real.text
        assert http.get("/health").json()["status"] == "ok"


def _real_request(path: str) -> dict[str, Any]:
    if SHAPE_OF[path] in ("tokenize", "detokenize", "apply-template"):
        return {"content": "hi", "tokens": [1, 2], "messages": [{"role": "user", "content": "hi"}]}
    if SHAPE_OF[path] in ("chat", "messages"):
        return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    if SHAPE_OF[path] == "responses":
        return {"input": "hi", "max_output_tokens": 4}
    if SHAPE_OF[path] == "openai completion":
        return {"prompt": "def f(", "max_tokens": 4}
    return {"prompt": "x", "input_prefix": "def f(", "input_suffix": "\n", "n_predict": 4}
