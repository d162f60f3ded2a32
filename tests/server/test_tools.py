"""OpenAI tool calling against a real server on tiny models with Qwen2.5's chat template.

The tiny models are random: whatever call they make comes from the constraint alone, so a
call that parses and validates against its function's parameters proves the constraint.
Every schema here bounds its strings and numbers, so a random model finishes a call well
within `max_tokens` (and a test that still ran out would see finish_reason "length").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from localspec import Message, Runtime, RuntimeSettings
from localspec.tools.calls import ToolCall
from tests.server.conftest import Server, qwen_models, qwen_server, server_env
from tests.server.schemas import WEATHER
from tests.server.test_behaviour import error_of

__all__ = ["qwen_models", "qwen_server", "server_env"]

CHAT = "/v1/chat/completions"
TIME = {
    "type": "object",
    "properties": {"hours": {"type": "integer", "minimum": 0, "maximum": 23}},
    "required": ["hours"],
    "additionalProperties": False,
}
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": WEATHER,
        },
    },
    {"type": "function", "function": {"name": "set_alarm", "parameters": TIME}},
    {"type": "function", "function": {"name": "ping"}},  # no parameters: arguments {}
]
SCHEMAS = {
    "get_weather": WEATHER,
    "set_alarm": TIME,
    "ping": {"type": "object", "additionalProperties": False},
}
ASK: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather in Paris?"}
]
ENOUGH = 200  # tokens: the longest call here is about 90 (the tiny vocabulary is bytes)


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0)


def valid_calls(message: Any) -> list[tuple[str, Any]]:
    """The message's calls as (name, arguments), each checked against its parameters."""
    calls = []
    for call in message.tool_calls or []:
        assert call.id.startswith("call_") and call.type == "function"
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        calls.append((call.function.name, arguments))
    return calls


@pytest.mark.parametrize("parallel", [True, False])
def test_required_makes_a_valid_call(qwen_server: Server, parallel: bool) -> None:
    answer = client(qwen_server).chat.completions.create(
        model="target",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=parallel,
        max_tokens=ENOUGH * 3,
        temperature=0,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = valid_calls(choice.message)
    assert len(calls) >= 1 if parallel else len(calls) == 1
    assert choice.message.content is None


@pytest.mark.parametrize("name", ["get_weather", "set_alarm", "ping"])
def test_a_named_function_is_the_one_called(qwen_server: Server, name: str) -> None:
    answer = client(qwen_server).chat.completions.create(
        model="target",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": name}},
        max_tokens=ENOUGH,
        temperature=0.8,
        seed=3,
    )
    assert answer.choices[0].finish_reason == "tool_calls"
    assert [called for called, _ in valid_calls(answer.choices[0].message)] == [name]


@pytest.mark.parametrize("spec", ["off", "ngram", "draft", "auto"])
def test_streamed_deltas_reassemble_to_the_whole_answer(qwen_server: Server, spec: str) -> None:
    """Greedy: the same calls (names, arguments) streamed as OpenAI deltas as answered whole,
    each call opened once with its index, id and name, then its arguments in pieces."""
    request: dict[str, Any] = {
        "model": "target",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": ENOUGH * 3,
        "temperature": 0,
        "extra_body": {"spec": spec},
    }
    api = client(qwen_server)
    whole = api.chat.completions.create(**request)
    chunks = list(api.chat.completions.create(**request, stream=True))
    opened: dict[int, tuple[str, str]] = {}
    arguments: dict[int, str] = {}
    content = ""
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            if call.id is not None:
                assert call.index not in opened and call.function is not None
                assert call.function.name is not None
                opened[call.index] = (call.id, call.function.name)
            assert call.function is not None
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
    assert content == ""  # no markup leaks into the content
    streamed = [(opened[i][1], json.loads(arguments[i])) for i in sorted(opened)]
    assert streamed == valid_calls(whole.choices[0].message)
    assert sorted(opened) == list(range(len(opened)))
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == ["tool_calls"]


def test_none_answers_in_text_with_the_tools_in_the_prompt(qwen_server: Server) -> None:
    api = client(qwen_server)
    plain = api.chat.completions.create(model="target", messages=ASK, max_tokens=1)
    answer = api.chat.completions.create(
        model="target", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=40
    )
    assert answer.choices[0].message.tool_calls is None
    assert "<tool_call>" not in (answer.choices[0].message.content or "")
    assert answer.choices[0].finish_reason in ("stop", "length")
    # the tools are rendered (the system block with their definitions) even though unused
    assert answer.usage is not None and plain.usage is not None
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 100


def test_a_tool_calling_loop_over_the_openai_client(qwen_server: Server) -> None:
    """Call, tool result, final answer: the result goes back through the template."""
    api = client(qwen_server)
    messages = list(ASK)
    first = api.chat.completions.create(
        model="target", messages=messages, tools=TOOLS, tool_choice="required", max_tokens=600
    )
    message = first.choices[0].message
    assert valid_calls(message)
    messages.append(message.model_dump(exclude_none=True))  # type: ignore[arg-type]
    for call in message.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"})
    final = api.chat.completions.create(
        model="target", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=16
    )
    assert final.choices[0].message.tool_calls is None
    assert final.usage is not None and first.usage is not None
    assert final.usage.prompt_tokens > first.usage.prompt_tokens  # the call and its result


def test_history_with_calls_and_results_renders_through_the_template(
    qwen_models: tuple[Path, Path], qwen_server: Server
) -> None:
    """Qwen's own format for calls, results and tools; the server's prompt is that text."""
    call = ToolCall("call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}')
    conversation = [
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "18 C", tool_call_id="call_1"),
    ]
    definitions = [dict(tool) for tool in TOOLS]
    with Runtime(RuntimeSettings(target=qwen_models[0], n_ctx=2048, n_threads=1)) as runtime:
        tokens = runtime.prompts.chat_prompt(conversation, definitions)
        text = runtime.models.target_model.detokenize(tokens)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris", "unit": "celsius"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    ).replace("<|im_start|>", "").replace("<|im_end|>", "") in text
    assert json.dumps(definitions[0]) in text  # the tools block: each definition as JSON
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]
    with qwen_server.unix() as http:
        body = {"messages": history, "tools": TOOLS, "max_tokens": 1}
        answer = http.post(CHAT, json=body).json()
    assert answer["usage"]["prompt_tokens"] == len(tokens)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"tool_choice": "required"}, "tool_choice", "no 'tools'"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
            "not among",
        ),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "auto, none, required"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "name"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools", "twice"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]},
            "tools[0].function.parameters",
            "JSON schema",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "strin"}},
                    }
                ]
            },
            "tools",
            "strin",
        ),
        ({"tools": TOOLS, "grammar": 'root ::= "a"'}, "grammar", "cannot be combined"),
        ({"functions": [{"name": "f"}]}, "functions", "'tools'"),
    ],
)
def test_bad_tool_requests_are_400s_naming_the_field(
    qwen_server: Server, body: dict[str, Any], param: str, words: str
) -> None:
    with qwen_server.unix() as http:
        response = http.post(CHAT, json={"messages": ASK, "max_tokens": 4, **body})
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["param"] == param and words in str(error["message"])
        assert http.post(CHAT, json={"messages": ASK, "max_tokens": 2}).status_code == 200


def test_a_template_without_tool_calls_refuses_tools(server: Server) -> None:
    """The usual tiny model's template renders no tools: they would never reach the model."""
    with server.unix() as http:
        response = http.post(CHAT, json={"messages": ASK, "tools": TOOLS, "max_tokens": 4})
    assert response.status_code == 400
    assert error_of(response)["param"] == "tools"
    assert "<tool_call>" in str(error_of(response)["message"])
