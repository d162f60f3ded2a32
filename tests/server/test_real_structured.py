"""Structured output and tool calls on the real Qwen2.5-Coder pair (marker real_model), through
the official `openai` client: what an agent (Continue, Cline) or a script experiences.

Run with `pytest -m real_model tests/server/test_real_structured.py -s` to see the answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import BaseModel

from tests.server.conftest import Server, server_env, start_server

__all__ = ["server_env"]

pytestmark = pytest.mark.real_model

SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    (
        "Extract the person: 'Grace Hopper, born 1906, worked on COBOL and FLOW-MATIC.'",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "born": {"type": "integer"},
                "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            },
            "required": ["name", "born", "languages"],
            "additionalProperties": False,
        },
    ),
    (
        "Write a config for a web service on port 8080 with debug off and two workers.",
        {
            "type": "object",
            "properties": {
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "debug": {"type": "boolean"},
                "workers": {"type": "integer", "minimum": 1},
                "host": {"type": "string"},
            },
            "required": ["port", "debug", "workers"],
            "additionalProperties": False,
        },
    ),
    (
        "Classify this bug report: 'The app crashes when I click save.'",
        {
            "type": "object",
            "properties": {
                "severity": {"enum": ["low", "medium", "high"]},
                "component": {"type": "string"},
            },
            "required": ["severity", "component"],
            "additionalProperties": False,
        },
    ),
]
WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city's name"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
SYSTEM = (
    "You are a helpful assistant. Call a tool when you need data; once a tool has answered, "
    "reply to the user in plain words."
)
ASK: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather like in Paris right now, in celsius?"}
]


@pytest.fixture(scope="module")
def structured_server(server_env: None, pair_paths: tuple[Path, Path]) -> Iterator[Server]:
    """The pair drafting with the draft model under each constraint's mask. Not `auto`, and
    one batch verifies (no exact-width chunks): either calibrates first, minutes on a busy
    machine."""
    target, draft = pair_paths
    server = start_server(
        target, draft, "--ctx-size", "4096", "--spec", "draft", "--no-redecode-ties", threads=None
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def api(structured_server: Server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{structured_server.url}/v1",
        api_key=structured_server.token,
        max_retries=0,
        timeout=600,
    )


@pytest.mark.parametrize(("prompt", "schema"), SCHEMAS, ids=["extract", "config", "classify"])
def test_every_constrained_answer_validates(
    api: openai.OpenAI, prompt: str, schema: dict[str, Any]
) -> None:
    answer = api.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": prompt}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        },
        max_tokens=200,
        temperature=0,
    )
    content = answer.choices[0].message.content or ""
    print(
        f"\n{prompt}\n-> {content}  ({(answer.model_extra or {})['localspec']['mask_s']} s masks)"
    )
    assert answer.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(content), schema)


class Person(BaseModel):
    name: str
    born: int
    field: Literal["mathematics", "computing", "physics"]


def test_openai_parse_with_a_pydantic_model(api: openai.OpenAI) -> None:
    answer = api.chat.completions.parse(
        model="default",
        messages=[
            {
                "role": "user",
                "content": "Ada Lovelace (born 1815) wrote the first computer program. "
                "Give her name, birth year and field.",
            }
        ],
        response_format=Person,
        max_tokens=120,
        temperature=0,
    )
    person = answer.choices[0].message.parsed
    print(f"\nparsed: {person!r}")
    assert isinstance(person, Person)
    assert "Ada" in person.name and person.born == 1815


def weather_call(message: Any) -> Any:
    """The message's one call: get_weather for Paris."""
    [call] = message.tool_calls or []
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and "Paris" in arguments["city"]
    return call


def test_auto_reads_the_call_the_model_writes(api: openai.OpenAI) -> None:
    """Asked without a system prompt, the 1.5B Coder writes its call as a ```json object, not
    in <tool_call> markup: it still comes back as a call, its arguments constrained."""
    answer = api.chat.completions.create(
        model="default", messages=ASK, tools=[WEATHER], max_tokens=120, temperature=0
    )
    print(f"\ncall: {answer.choices[0].message.tool_calls}")
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.choices[0].message.content is None
    weather_call(answer.choices[0].message)


def test_a_tool_calling_loop(api: openai.OpenAI) -> None:
    """Call, result, answer: the call is required (the 1.5B Coder, told to answer in words,
    rarely calls by itself), the answer is the model's choice with the tool still offered."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": SYSTEM}, *ASK]
    first = api.chat.completions.create(
        model="default",
        messages=messages,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=120,
        temperature=0,
    )
    assert first.choices[0].finish_reason == "tool_calls"
    call = weather_call(first.choices[0].message)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))  # type: ignore[arg-type]
    result = {"temperature": 18, "unit": "celsius", "sky": "sunny"}
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = api.chat.completions.create(
        model="default", messages=messages, tools=[WEATHER], max_tokens=80, temperature=0
    )
    text = final.choices[0].message.content or ""
    print(f"\nanswer: {text!r}")
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.tool_calls is None
    assert "18" in text


def test_a_streamed_call_is_the_whole_call(api: openai.OpenAI) -> None:
    request: dict[str, Any] = {
        "model": "default",
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,  # greedy, the 1.5B Coder calls again and again
        "max_tokens": 120,
        "temperature": 0,
    }
    whole = api.chat.completions.create(**request).choices[0].message.tool_calls or []
    assert whole, "tool_choice required, yet no call: nothing to compare the stream with"
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in api.chat.completions.create(**request, stream=True):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert delta.function is not None
            if delta.function.name:
                names[delta.index] = delta.function.name
            arguments[delta.index] = arguments.get(delta.index, "") + (
                delta.function.arguments or ""
            )
    streamed = [(names[i], json.loads(arguments[i])) for i in sorted(names)]
    assert streamed == [(c.function.name, json.loads(c.function.arguments)) for c in whole]
