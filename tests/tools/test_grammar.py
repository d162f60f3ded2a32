"""The tool-call grammars on a real vocabulary: which outputs each `tool_choice` allows.

Checked with the engine's own constraint compiler over the tiny model's byte vocabulary, by
how many tokens of a given output the constraint accepts (`Guide.validate`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from localspec.constraints import Constraint
from localspec.constraints.compile import ConstraintCompiler
from localspec.llama.model import LlamaModel
from localspec.runtime import constraint_compiler
from localspec.tools.grammar import Tool, ToolChoice, call_grammar

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [Tool("get_weather", CITY, {}), Tool("ping", {}, {})]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
PING = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
BAD_ARGUMENTS = CALL.replace('"city"', '"town"')
UNKNOWN = CALL.replace("get_weather", "get_time")
TEXT = "The weather is fine."


@pytest.fixture(scope="module")
def compiler(model: LlamaModel) -> ConstraintCompiler:
    return constraint_compiler(model)


def accepted(
    model: LlamaModel, compiler: ConstraintCompiler, choice: ToolChoice, text: str, **options: Any
) -> bool | int:
    """True when the constraint takes all of `text` and may end there, else the number of
    characters it took (the tiny vocabulary spells text byte by byte)."""
    grammar = call_grammar(TOOLS, choice, **options)
    guide = compiler.guide(Constraint.lark(grammar))
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    valid = guide.validate(tokens)
    if valid < len(tokens):
        return len(model.detokenize(tokens[:valid]))
    guide.commit(tokens)
    return guide.accepting


AUTO, REQUIRED, NONE = ToolChoice("auto"), ToolChoice("required"), ToolChoice("none")


def test_auto_allows_text_and_constrains_a_call_once_opened(
    model: LlamaModel, compiler: ConstraintCompiler
) -> None:
    assert accepted(model, compiler, AUTO, TEXT) is True
    assert accepted(model, compiler, AUTO, TEXT + "\n" + CALL) is True
    assert accepted(model, compiler, AUTO, CALL + "\n" + PING) is True
    # past `<tool_call>` the output is a call: the declared names, the parameter schema
    assert accepted(model, compiler, AUTO, TEXT + BAD_ARGUMENTS) == len(TEXT) + CALL.index("city")
    assert accepted(model, compiler, AUTO, UNKNOWN) == len('<tool_call>\n{"name": "get_')


def test_auto_forces_a_call_begun_as_a_json_object(
    model: LlamaModel, compiler: ConstraintCompiler
) -> None:
    fenced = '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Rome"}\n}\n```'
    assert accepted(model, compiler, AUTO, fenced) is True
    assert accepted(model, compiler, AUTO, '{"name": "ping", "arguments": {}}') is True
    assert accepted(model, compiler, AUTO, '{"name": "other"') == len('{"name": "')
    assert accepted(model, compiler, AUTO, '{"title": "a JSON answer"}') is True
    assert accepted(model, compiler, AUTO, "```python\nprint(1)\n```") is True


def test_one_call_at_most_without_parallel_calls(
    model: LlamaModel, compiler: ConstraintCompiler
) -> None:
    assert accepted(model, compiler, AUTO, CALL, parallel=False) is True
    assert accepted(model, compiler, AUTO, CALL + "\n" + PING, parallel=False) == len(CALL)
    assert accepted(model, compiler, REQUIRED, CALL + "\n" + PING, parallel=False) == len(CALL)


def test_required_allows_only_calls(model: LlamaModel, compiler: ConstraintCompiler) -> None:
    assert accepted(model, compiler, REQUIRED, TEXT) == 0
    assert accepted(model, compiler, REQUIRED, CALL + "\n" + PING) is True
    assert accepted(model, compiler, REQUIRED, "") is False  # a call must come
    named = ToolChoice("function", "ping")
    assert accepted(model, compiler, named, PING) is True
    assert accepted(model, compiler, named, CALL) == len('<tool_call>\n{"name": "')


def test_none_allows_text_but_never_a_call(model: LlamaModel, compiler: ConstraintCompiler) -> None:
    assert accepted(model, compiler, NONE, TEXT + " <tool and <tool_cal") is True
    assert accepted(model, compiler, NONE, TEXT + CALL) == len(TEXT + "<tool_call")


def test_arguments_have_qwens_spacing(model: LlamaModel, compiler: ConstraintCompiler) -> None:
    """`{"city": "Paris"}` as the template's tojson writes it; no other whitespace."""
    spaced = CALL.replace('{"city"', '{ "city"')
    assert accepted(model, compiler, REQUIRED, spaced) == spaced.index("{ ") + 1


def test_a_text_answer_may_have_to_match_a_schema(
    model: LlamaModel, compiler: ConstraintCompiler
) -> None:
    schema = json.dumps(CITY)
    assert accepted(model, compiler, AUTO, '{"city": "Rome"}', answer_schema=schema) is True
    assert accepted(model, compiler, AUTO, CALL, answer_schema=schema) is True
    assert accepted(model, compiler, AUTO, TEXT, answer_schema=schema) == 0
