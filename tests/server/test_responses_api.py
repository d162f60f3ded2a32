"""OpenAI's Responses API against a real server on tiny models, through the `openai` SDK.

As for the Messages API: calls are proven by their schemas, answers compared with other
answers of the same server, and every stream's event sequence asserted in full.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.server.conftest import Server, qwen_models, qwen_server, server_env
from tests.server.schemas import WEATHER

__all__ = ["qwen_models", "qwen_server", "server_env"]

TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER},
    {"type": "function", "name": "ping", "parameters": {"type": "object", "properties": {}}},
]
ANSWER = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
FORMAT: Any = {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER}}
MODEL = "gpt-5-codex"  # what Codex CLI sends: any name is served
ASK = "What is the weather in Paris?"


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0)


def test_text_answer_incomplete_at_max_output_tokens(qwen_server: Server) -> None:
    response = client(qwen_server).responses.create(
        model=MODEL, input=ASK, max_output_tokens=5, temperature=0
    )
    assert response.id.startswith("resp_") and response.model == MODEL
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["message"]
    assert response.usage is not None and response.usage.output_tokens == 5
    assert response.output_text


def test_stream_event_order(qwen_server: Server) -> None:
    events = list(
        client(qwen_server).responses.create(
            model=MODEL, input=ASK, max_output_tokens=5, temperature=0, stream=True
        )
    )
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    whole = client(qwen_server).responses.create(
        model=MODEL, input=ASK, max_output_tokens=5, temperature=0
    )
    assert text == whole.output_text


def test_text_format_json_schema_streamed_and_whole(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    with sdk.responses.stream(model=MODEL, input=ASK, text=FORMAT, max_output_tokens=60) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    jsonschema.validate(json.loads(final.output_text), ANSWER)
    whole = sdk.responses.create(model=MODEL, input=ASK, text=FORMAT, max_output_tokens=60)
    assert whole.output_text == final.output_text


def the_call(response: Any) -> Any:
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    return call


def test_function_call_and_its_output_by_previous_response_id(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    forced: Any = {"type": "function", "name": "get_weather"}
    first = sdk.responses.create(
        model=MODEL, input=ASK, tools=TOOLS, tool_choice=forced, max_output_tokens=300
    )
    call = the_call(first)
    with sdk.responses.stream(
        model=MODEL, input=ASK, tools=TOOLS, tool_choice=forced, max_output_tokens=300
    ) as stream:
        kinds = [event.type for event in stream]
        streamed = the_call(stream.get_final_response())
    assert streamed.arguments == call.arguments
    assert kinds.index("response.function_call_arguments.delta") < kinds.index(
        "response.function_call_arguments.done"
    )
    result: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    second = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=result,
        tools=TOOLS,
        tool_choice="none",
        max_output_tokens=3,
    )
    assert second.previous_response_id == first.id
    assert [item.type for item in second.output] == ["message"]
    assert first.usage is not None and second.usage is not None
    # the second prompt is the first's conversation, its call and the result
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    # the same conversation sent whole is the same prompt
    whole: Any = [
        {"role": "user", "content": ASK},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        *result,
    ]
    again = sdk.responses.create(
        model=MODEL, input=whole, tools=TOOLS, tool_choice="none", max_output_tokens=3
    )
    assert again.usage is not None and again.usage.input_tokens == second.usage.input_tokens
    assert again.output_text == second.output_text


def test_unknown_previous_response_is_404(qwen_server: Server) -> None:
    with pytest.raises(openai.NotFoundError, match="resp_nope"):
        client(qwen_server).responses.create(
            model=MODEL, input="hi", previous_response_id="resp_nope", max_output_tokens=2
        )


def test_llama_server_grammar_applies_here_too(qwen_server: Server) -> None:
    answer = client(qwen_server).responses.create(
        model=MODEL, input=ASK, max_output_tokens=8, extra_body={"grammar": 'root ::= "yes"'}
    )
    assert answer.output_text == "yes"


def test_store_false_is_not_kept(qwen_server: Server) -> None:
    sdk = client(qwen_server)
    kept = sdk.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(
            model=MODEL, input="more", previous_response_id=kept.id, max_output_tokens=2
        )


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": []}, "input"),
        (
            {
                "model": MODEL,
                "input": ASK,
                "tools": [{"type": "web_search"}],
                "tool_choice": {"type": "web_search"},
            },
            "web_search",
        ),
        ({"model": MODEL, "input": ASK, "tools": [{"type": "local_shell"}]}, "local_shell"),
        ({"model": MODEL, "input": [{"type": "computer_call"}]}, "computer_call"),
        (
            {"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input_image",
        ),
        ({"model": MODEL, "input": ASK, "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"model": MODEL, "input": ASK, "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": MODEL, "input": ASK, "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": MODEL, "input": ASK, "store": "no"}, "store"),
        ({"model": MODEL, "input": ASK, "metadata": [1]}, "metadata"),
        ({"model": MODEL, "input": ASK, "conversation": "conv_1"}, "conversation"),
        ({"model": MODEL, "input": ASK, "top_logprobs": 5}, "top_logprobs"),
        ({"model": MODEL, "input": ASK, "grammar": 5}, "grammar"),
        ({"model": MODEL, "input": ASK, "logit_bias": {"5": 1}}, "logit_bias"),
        (
            {"model": MODEL, "input": ASK, "grammar": 'root ::= "a"', "text": FORMAT},
            "both constrain",
        ),
    ],
)
def test_bad_bodies_are_openai_400s(qwen_server: Server, body: dict[str, Any], names: str) -> None:
    with qwen_server.tcp() as http:
        response = http.post("/v1/responses", json=body)
    assert response.status_code == 400
    assert names in response.json()["error"]["message"]
