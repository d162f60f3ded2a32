"""Anthropic's Messages API against a real server on tiny models, through the `anthropic` SDK.

The tiny models are random: a tool call that parses and validates against its schema proves
the constraint, and an answer is compared with another answer of the same server, never with
expected words. Every event sequence is asserted in full, as the SDK and Claude Code read it.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import jsonschema
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.server.conftest import Server, qwen_models, qwen_server, server_env
from tests.server.schemas import WEATHER

__all__ = ["qwen_models", "qwen_server", "server_env"]

TOOLS: list[ToolParam] = [
    {"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER},
    {"name": "ping", "input_schema": {"type": "object", "properties": {}}},
]
ASK: list[MessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
MODEL = "claude-sonnet-4-5"  # what Claude Code sends: any name is served
# the SDK no longer sends sampling fields; older SDKs and other clients do, and they apply
GREEDY = {"temperature": 0}


def client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=server.token, max_retries=0)


def raw_events(server: Server, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A stream's events as (SSE event name, data), read off the socket without an SDK."""
    with server.tcp() as http, http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200, response.read()
        text = response.read().decode()
    events = []
    for record in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in record.splitlines())
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        events.append((lines["event"], data))
    return events


def test_text_answer_and_max_tokens(qwen_server: Server) -> None:
    message = client(qwen_server).messages.create(
        model=MODEL, max_tokens=5, messages=ASK, extra_body=GREEDY
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.model == MODEL
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 5
    assert [block.type for block in message.content] == ["text"]
    assert message.id.startswith("msg_")


def test_stream_event_order_and_same_answer(qwen_server: Server) -> None:
    body = {"model": MODEL, "max_tokens": 5, "messages": ASK, "temperature": 0, "stream": True}
    events = raw_events(qwen_server, body)
    names = [name for name, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"]["output_tokens"] == 5
    assert "localspec" in delta  # the speculative statistics ride on the last event
    streamed = "".join(
        data["delta"]["text"] for name, data in events if name == "content_block_delta"
    )

    with client(qwen_server).messages.stream(
        model=MODEL, max_tokens=5, messages=ASK, extra_body=GREEDY
    ) as stream:
        final = stream.get_final_message()
    whole = client(qwen_server).messages.create(
        model=MODEL, max_tokens=5, messages=ASK, extra_body=GREEDY
    )
    assert final.content[0].type == "text" and whole.content[0].type == "text"
    assert final.content[0].text == streamed == whole.content[0].text


def valid_use(block: Any) -> dict[str, Any]:
    assert block.type == "tool_use" and block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER)
    return dict(block.input)


def test_forced_tool_call_whole_and_streamed(qwen_server: Server) -> None:
    ask: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 300,
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "extra_body": GREEDY,
    }
    whole = client(qwen_server).messages.create(**ask)
    assert whole.stop_reason == "tool_use"
    uses = [block for block in whole.content if block.type == "tool_use"]
    assert len(uses) == 1
    arguments = valid_use(uses[0])

    with client(qwen_server).messages.stream(**ask) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    streamed_uses = [block for block in final.content if block.type == "tool_use"]
    assert [valid_use(block) for block in streamed_uses] == [arguments]
    assert "input_json" in kinds  # the SDK's event for input_json_delta


def test_tool_result_round_trip(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    first = sdk.messages.create(
        model=MODEL,
        max_tokens=300,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "any"},
        extra_body=GREEDY,
    )
    use = next(block for block in first.content if block.type == "tool_use")
    answered: Any = [block.model_dump() for block in first.content]
    history: list[MessageParam] = [
        *ASK,
        {"role": "assistant", "content": answered},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 degrees"}
            ],
        },
    ]
    counted = sdk.messages.count_tokens(model=MODEL, messages=history, tools=TOOLS)
    shorter = sdk.messages.count_tokens(model=MODEL, messages=history[:2], tools=TOOLS)
    assert counted.input_tokens > shorter.input_tokens
    second = sdk.messages.create(
        model=MODEL, max_tokens=4, messages=history, tools=TOOLS, tool_choice={"type": "none"}
    )
    assert second.stop_reason == "max_tokens"
    assert all(block.type == "text" for block in second.content)
    usage = second.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted.input_tokens
    # the conversation up to the call was cached by the first request
    assert (usage.cache_read_input_tokens or 0) > 0


def test_stop_sequences(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    longer = {**GREEDY, "ignore_eos": True}  # llama.cpp's field: a random model ends early
    free = sdk.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body=longer)
    assert free.content[0].type == "text"
    text = free.content[0].text
    stop = text[6:9]
    assert len(stop) == 3
    cut = sdk.messages.create(
        model=MODEL, max_tokens=24, messages=ASK, extra_body=longer, stop_sequences=[stop]
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].type == "text"
    assert cut.content[0].text == text[: text.index(stop)]


def test_llama_server_stop_is_honoured_beside_stop_sequences(qwen_server: Server) -> None:
    """Every endpoint reads the whole field table, `stop` included: it was checked here,
    then dropped for `stop_sequences`' empty default."""
    sdk = client(qwen_server)
    longer = {**GREEDY, "ignore_eos": True}
    text = sdk.messages.create(model=MODEL, max_tokens=24, messages=ASK, extra_body=longer)
    assert text.content[0].type == "text"
    whole = text.content[0].text
    first, second = whole[4:6], whole[10:13]
    assert first not in whole[:4] and second not in whole[:10]
    cut = sdk.messages.create(
        model=MODEL, max_tokens=24, messages=ASK, extra_body={**longer, "stop": [second]}
    )
    assert (cut.stop_reason, cut.stop_sequence) == ("stop_sequence", second)
    assert cut.content[0].type == "text" and cut.content[0].text == whole[:10]
    both = sdk.messages.create(
        model=MODEL,
        max_tokens=24,
        messages=ASK,
        stop_sequences=[second],
        extra_body={**longer, "stop": [first]},
    )
    assert both.stop_sequence == first


def test_llama_server_constraint_fields_apply_here_too(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    answer = sdk.messages.create(
        model=MODEL, max_tokens=8, messages=ASK, extra_body={"grammar": 'root ::= "yes" | "no"'}
    )
    assert answer.content[0].type == "text" and answer.content[0].text in ("yes", "no")
    both = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": ASK,
        "grammar": 'root ::= "yes"',
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    }
    with qwen_server.tcp() as http:
        refused = http.post("/v1/messages", json=both)
        bad = http.post("/v1/messages", json={**both, "output_config": None, "grammar": 5})
    assert refused.status_code == 400 and "both constrain" in refused.text
    assert bad.status_code == 400 and "grammar" in bad.text


def test_count_tokens_is_the_prompt(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    counted = sdk.messages.count_tokens(model=MODEL, messages=ASK, system="Be brief.")
    answer = sdk.messages.create(model=MODEL, max_tokens=1, messages=ASK, system="Be brief.")
    usage = answer.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_thinking_blocks_sent_back_are_ignored(qwen_server: Server) -> None:
    thought: list[MessageParam] = [
        *ASK,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Sunny."},
            ],
        },
        {"role": "user", "content": "Thanks"},
    ]
    plain: list[MessageParam] = [
        *ASK,
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Thanks"},
    ]
    sdk = client(qwen_server)
    assert (
        sdk.messages.count_tokens(model=MODEL, messages=thought).input_tokens
        == sdk.messages.count_tokens(model=MODEL, messages=plain).input_tokens
    )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"model": MODEL, "messages": ASK}, "max_tokens"),
        ({"model": MODEL, "max_tokens": 4, "messages": []}, "messages"),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            },
            "image",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": ASK,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "web_search_20250305",
        ),
        ({"model": MODEL, "max_tokens": 4, "messages": ASK, "tool_choice": {"type": "x"}}, "tool"),
        (
            {"model": MODEL, "max_tokens": 4, "messages": [{"role": "tool", "content": "x"}]},
            "role",
        ),
    ],
)
def test_bad_bodies_are_anthropic_400s(
    qwen_server: Server, body: dict[str, Any], names: str
) -> None:
    with qwen_server.tcp() as http:
        response = http.post("/v1/messages", json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert names in error["error"]["message"]


def test_x_api_key_is_the_token(qwen_server: Server) -> None:
    body = {"model": MODEL, "max_tokens": 1, "messages": ASK}
    with httpx2.Client(base_url=qwen_server.url) as http:
        assert (
            http.post("/v1/messages", json=body, headers={"x-api-key": "wrong"}).status_code == 401
        )
        right = {"x-api-key": qwen_server.token or "", "anthropic-version": "2023-06-01"}
        assert http.post("/v1/messages", json=body, headers=right).status_code == 200
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=qwen_server.url, api_key="wrong", max_retries=0
        ).messages.create(model=MODEL, max_tokens=1, messages=ASK)


def test_output_config_format_is_followed(qwen_server: Server) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    answer = client(qwen_server).messages.create(
        model=MODEL,
        max_tokens=60,
        messages=ASK,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].type == "text"
    jsonschema.validate(json.loads(answer.content[0].text), schema)


def test_system_turns_between_messages_are_rendered(qwen_server: Server) -> None:
    """Claude Code sends `{"role": "system"}` turns inside `messages` (its agent list)."""
    sdk = client(qwen_server)
    between: Any = [*ASK, {"role": "system", "content": "Agents: none."}]
    plain = sdk.messages.count_tokens(model=MODEL, messages=ASK)
    counted = sdk.messages.count_tokens(model=MODEL, messages=between)
    assert counted.input_tokens > plain.input_tokens
    answer = sdk.messages.create(model=MODEL, max_tokens=2, messages=between)
    assert answer.stop_reason in ("max_tokens", "end_turn")


def test_a_tool_schema_with_keywords_the_constraint_lacks_is_served(qwen_server: Server) -> None:
    """Claude Code's TaskCreate declares `propertyNames`, which llguidance does not implement:
    the call is still constrained by the rest of the schema, not refused."""
    metadata = {"type": "object", "propertyNames": {"type": "string"}, "maxProperties": 0}
    schema = {
        "type": "object",
        "properties": {"subject": {"type": "string", "maxLength": 5}, "metadata": metadata},
        "required": ["subject"],
        "additionalProperties": False,
    }
    answer = client(qwen_server).messages.create(
        model=MODEL,
        max_tokens=200,
        messages=ASK,
        tools=[{"name": "task", "input_schema": schema}],
        tool_choice={"type": "tool", "name": "task"},
    )
    use = next(block for block in answer.content if block.type == "tool_use")
    assert isinstance(use.input, dict)
    jsonschema.validate(use.input, schema)
