"""The constraints that make a tool call well-formed, in llguidance's Lark dialect.

A call is Qwen2.5's (Hermes') markup around the function's arguments, each arguments object
constrained by that function's parameter schema (`%json`). What the output may hold besides
calls depends on `tool_choice`:

- `required`: one call or more (`parallel_tool_calls` false: exactly one), nothing else;
- a named function: exactly one call of it;
- `auto`: any text; once the model writes `<tool_call>` the call is forced to be complete and
  valid (a lazy lexeme, llguidance's pattern for tool calls: no engine hook needed), and so
  is an answer that begins as a call object (`{"name":`, or in a ```json fence), which small
  Qwen2.5 models write instead of markup. With a `response_format` schema the text answer
  must match it instead;
- `none`: any text that never opens a call (the tools stay in the prompt, as with OpenAI).

JSON inside calls is written with Qwen's own spacing (`{"city": "Paris"}`, what its template's
`tojson` renders in the history) and no other whitespace: a model then cannot drift into
newlines between keys, and the calls read back exactly as the template writes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from localspec.tools.calls import CLOSE, OPEN

ChoiceMode = Literal["auto", "none", "required", "function"]

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance's JSON options for arguments: the separators Qwen's template writes."""
TOOL_STYLE = {**JSON_STYLE, "lenient": True}
"""For tools' parameters: keywords llguidance does not implement are left unchecked."""

NO_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}
"""A function declared without `parameters` takes none: its arguments are `{}`."""


@dataclass(frozen=True)
class Tool:
    """One function the model may call: its name, the JSON schema of its arguments, and the
    definition as the chat template renders it (OpenAI's `{"type": "function", ...}`)."""

    name: str
    parameters: Mapping[str, Any]
    definition: Mapping[str, Any]


@dataclass(frozen=True)
class ToolChoice:
    """`tool_choice`: `auto`, `none`, `required`, or `function` with the function's `name`."""

    mode: ChoiceMode = "auto"
    name: str | None = None


def call_grammar(
    tools: Sequence[Tool],
    choice: ToolChoice,
    *,
    parallel: bool = True,
    answer_schema: str | None = None,
    markup_tokens: bool = False,
) -> str:
    """The Lark grammar the whole output must match (see the module docstring).

    `answer_schema` is the JSON schema text a text answer must match (`response_format`);
    with `choice.mode` `none` callers constrain to that schema alone. `markup_tokens`: the
    model has `<tool_call>` and `</tool_call>` as special tokens (Qwen2.5 has), which the
    grammar then names as tokens: written out as text they would be other tokens."""
    if choice.mode == "function":
        tools = [tool for tool in tools if tool.name == choice.name]
    open_, close = (OPEN, CLOSE) if markup_tokens else (_literal(OPEN), _literal(CLOSE))
    rules = [
        "%llguidance {}",
        "TEXT: /(.|\\n)*/",
        f"NO_CALL: /(?s:.*)/ & ~/(?s:.*){_regex_literal(OPEN)}(?s:.*)/",
        # a special token cannot occur in TEXT; text has to be cut lazily where `<tool_call>` ends
        f"call_open: TEXT {open_}" if markup_tokens else f"call_open[lazy]: TEXT {open_}",
        f"call: {open_} call_body",
        "call_body: " + " | ".join(f"body_{i}" for i in range(len(tools))),
        "calls: call" + (' ("\\n" call)*' if parallel else ""),
        *_JSON_CALL,
        "json_body: " + " | ".join(f"json_{i}" for i in range(len(tools))),
    ]
    for index, tool in enumerate(tools):
        head = _literal(f'\n{{"name": {json.dumps(tool.name)}, "arguments": ')
        rules.append(f'body_{index}: {head} args_{index} "}}\\n" {close}')
        name = _literal(json.dumps(tool.name))
        rules.append(
            f'json_{index}: WS {name} WS "," WS "\\"arguments\\"" WS ":" WS args_{index} WS "}}"'
        )
        rules.append(f"args_{index}: %json {_schema_text(tool.parameters)}")
    if answer_schema is not None:
        rules.append(f"answer: %json {spaced_schema(answer_schema)}")
    rules.insert(1, "start: " + _start(choice.mode, parallel, answer_schema is not None))
    return "\n".join(rules) + "\n"


def _start(mode: ChoiceMode, parallel: bool, answer: bool) -> str:
    if mode in ("required", "function"):
        return "calls" if mode == "required" else "call"
    if mode == "none":
        return "answer" if answer else "NO_CALL"
    if answer:
        return "answer | calls"
    if parallel:  # text, calls with text between them, text after the last
        return "json_call | (call_open call_body)* TEXT"
    return "TEXT | json_call | call_open call_body"


# A call written as a JSON object, alone or in a ```json fence: what small Qwen2.5 models write
# instead of markup (llama.cpp's Hermes parser reads it too); forced once `{"name":` begins it
_JSON_CALL = (
    'json_fenced[lazy]: /[ \\t\\n]*```(json)?[ \\t\\n]*\\{[ \\t\\n]*"name"[ \\t\\n]*:/',
    'json_bare[lazy]: /[ \\t\\n]*\\{[ \\t\\n]*"name"[ \\t\\n]*:/',
    "json_call: json_fenced json_body FENCE_END | json_bare json_body",
    "WS: /[ \\t\\n]{0,8}/",
    "FENCE_END: /[ \\t\\n]{0,4}```/",
)


def _schema_text(parameters: Mapping[str, Any]) -> str:
    """The parameter schema with Qwen's JSON spacing, unless it sets llguidance's own, and
    lenient: a keyword the constraint library does not implement is left unchecked rather
    than refusing the whole request. Agents declare tools they did not write for this server
    (Claude Code's use `propertyNames`); their arguments still follow the rest of the schema,
    and a tool's own checks see them before they run. A response format is held to its
    schema strictly (`spaced_schema`)."""
    return json.dumps({"x-guidance": TOOL_STYLE, **(parameters or NO_PARAMETERS)})


def spaced_schema(schema_text: str) -> str:
    """A JSON schema's text with `JSON_STYLE` added, unless it sets llguidance's own: the
    output then has `json.dumps`'s spacing and no other whitespace. llguidance's default
    allows whitespace anywhere, and a model may then write newlines until max_tokens (a
    random test model always does). Text that is not an object schema is left as it is."""
    try:
        schema = json.loads(schema_text)
    except (ValueError, RecursionError):  # the compiler refuses it, deep text by its limits
        return schema_text
    if not isinstance(schema, dict) or "x-guidance" in schema:
        return schema_text
    return json.dumps({"x-guidance": JSON_STYLE, **schema})


def _literal(text: str) -> str:
    """A Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text)


def _regex_literal(text: str) -> str:
    """`text` inside `/.../`: regex syntax escaped (never `\\<`: a word boundary there)."""
    return "".join(f"\\{c}" if c in _REGEX_SYNTAX else c for c in text)


_REGEX_SYNTAX = frozenset(".^$*+?()[]{}|\\/")
