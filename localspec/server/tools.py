"""OpenAI tool calling on `/v1/chat/completions`: `tools`, `tool_choice`, `parallel_tool_calls`.

The tool definitions are rendered by the model's own chat template (Qwen2.5's `# Tools`
block) and the output is constrained by `localspec.tools.grammar`, so a call the model makes
always names a declared function and carries arguments valid for its parameter schema.
`tool_choice` `none` keeps the tools in the prompt (the prompt, and so the cached prefix, is
the same whatever the choice) and forbids calls, as OpenAI describes it: the model answers in
text. One call at most unless `parallel_tool_calls` is true (OpenAI's default is true, but a
small model given the chance repeats its call until max_tokens; llama-server long defaulted
to false too). The answer's calls become OpenAI's `tool_calls` (`ChatCalls`), streamed as
deltas.

Only models whose template writes calls as `<tool_call>` (Qwen2.5, Hermes and their kin) can
take tools: another format would be rendered in the prompt and never parsed back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localspec.constraints import Constraint
from localspec.server.constraints import Requested
from localspec.server.messages import function_of
from localspec.server.served_runtime import ServedRuntime
from localspec.server.wire import ApiError, Fields
from localspec.tools.calls import (
    CLOSE,
    OPEN,
    CallArguments,
    CallOpened,
    CallStream,
    Content,
    Piece,
    parse,
)
from localspec.tools.grammar import Tool, ToolChoice, call_grammar


@dataclass(frozen=True)
class ToolRequest:
    """The tools a request declares and how it lets the model use them."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool
    markup_tokens: bool

    @property
    def definitions(self) -> list[Mapping[str, Any]]:
        return [tool.definition for tool in self.tools]

    @property
    def may_call(self) -> bool:
        return self.choice.mode != "none"

    def constraint(self, answer: Requested | None) -> Requested:
        """The whole output's constraint: the calls allowed, and `answer` (a response_format)
        for a text answer."""
        schema = None
        if answer is not None:
            if answer.constraint.kind != "json_schema":
                raise ApiError(
                    400,
                    f"'{answer.param}' cannot be combined with tools: send a JSON schema as "
                    f"response_format, or no tools",
                    param=answer.param,
                )
            schema = answer.constraint.source
            if self.choice.mode == "none":
                return answer
        grammar = call_grammar(
            self.tools,
            self.choice,
            parallel=self.parallel,
            answer_schema=schema,
            markup_tokens=self.markup_tokens,
        )
        return Requested(Constraint.lark(grammar), "tools")


def tool_request(fields: Fields, runtime: ServedRuntime) -> ToolRequest | None:
    """The request's tools (None without any), checked against each other and the model."""
    tools = tuple(_tool(index, raw) for index, raw in enumerate(fields.objects("tools")))
    choice = tool_choice(fields)
    # not OpenAI's default: greedy, a small model allowed more calls repeats its call
    return checked_tools(fields, runtime, tools, choice, fields.boolean("parallel_tool_calls"))


def checked_tools(
    fields: Fields,
    runtime: ServedRuntime,
    tools: tuple[Tool, ...],
    choice: ToolChoice,
    parallel: bool,
) -> ToolRequest | None:
    """Tools however an API declares them (chat completions, Messages, Responses), checked
    against each other, the choice and the model; errors name `fields`' `tools` and
    `tool_choice`."""
    names = [tool.name for tool in tools]
    if not tools:
        if choice.mode in ("required", "function"):
            raise fields.error("tool_choice", f"is {choice.mode!r} but no 'tools' are given")
        return None
    if len(set(names)) < len(names):
        raise fields.error("tools", "declares a function name twice")
    if choice.mode == "function" and choice.name not in names:
        raise fields.error("tool_choice", f"names {choice.name!r}, which is not among the 'tools'")
    model = runtime.models.target_model
    template = model.chat_template or ""
    if OPEN not in template:
        raise fields.error(
            "tools",
            f"cannot be used with {model.path.name}: its chat template does not write tool "
            f"calls as {OPEN} (Qwen2.5 and Hermes models do)",
        )
    return ToolRequest(
        tools,
        choice,
        parallel,
        markup_tokens=all(_one_special_token(runtime, text) for text in (OPEN, CLOSE)),
    )


def function_tool(described: Fields, name: str, parameters_field: str = "parameters") -> Tool:
    """A function tool from its declaration's fields: what the chat template renders is the
    fields Qwen's training data has, in its order (OpenAI's `function` object)."""
    parameters = described.body.get(parameters_field)
    if parameters is not None and not isinstance(parameters, dict):
        raise described.error(parameters_field, "must be a JSON schema (an object)")
    shown: dict[str, Any] = {"name": name}
    if described.present("description"):
        shown["description"] = described.string("description")
    if parameters is not None:
        shown["parameters"] = parameters
    return Tool(name, parameters or {}, {"type": "function", "function": shown})


def _one_special_token(runtime: ServedRuntime, text: str) -> bool:
    """Whether the model has `text` as one special token (the constraint library tells
    special tokens apart from text: a grammar must name them as tokens)."""
    model = runtime.models.target_model
    return len(model.tokenize(text, add_special=False, parse_special=True)) == 1


def _tool(index: int, raw: Mapping[str, Any]) -> Tool:
    declared = Fields(raw, prefix=f"tools[{index}].")
    if declared.string("type", "function") != "function":
        raise declared.error("type", "must be function (the only kind of tool)")
    described, name = function_of(declared)
    return function_tool(described, name)


def tool_choice(fields: Fields) -> ToolChoice:
    """`tool_choice`: auto, none, required, or a function named as chat completions nest it
    (`{"type": "function", "function": {"name": ...}}`) or as the Responses API writes it
    (`{"type": "function", "name": ...}`)."""
    value = fields.body.get("tool_choice")
    if value is None:
        return ToolChoice("auto")
    if value in ("auto", "none", "required"):
        return ToolChoice(value)
    if isinstance(value, dict):
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else value.get("name")
        if isinstance(name, str) and name:
            return ToolChoice("function", name)
    raise fields.error(
        "tool_choice",
        'must be auto, none, required or {"type": "function", "function": {"name": ...}}',
    )


class ChatCalls:
    """A chat answer's tool calls on OpenAI's wire: deltas while it streams, the message once
    it is whole. Both read the text with `CallStream`, so they cannot differ."""

    def __init__(self) -> None:
        self._stream = CallStream()

    def delta(self, text: str) -> dict[str, Any]:
        return _delta(self._stream.feed(text))

    def rest(self) -> dict[str, Any]:
        """The delta of what the stream held back, at its end (may be empty)."""
        return _delta(self._stream.close())

    @property
    def streamed_calls(self) -> bool:
        return bool(self._stream.calls)

    @staticmethod
    def message(text: str) -> tuple[dict[str, Any], bool]:
        """The whole answer's `message`, and whether it holds calls."""
        read = parse(text)
        if not read.calls:
            return {"role": "assistant", "content": read.content}, False
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in read.calls
        ]
        message = {"role": "assistant", "content": read.content or None, "tool_calls": calls}
        return message, True


def _delta(pieces: list[Piece]) -> dict[str, Any]:
    """OpenAI's delta for `pieces`: their content, and per call its opening (index, id, name)
    and argument text."""
    delta: dict[str, Any] = {}
    content = "".join(piece.text for piece in pieces if isinstance(piece, Content))
    if content:
        delta["content"] = content
    calls: list[dict[str, Any]] = []
    for piece in pieces:
        if isinstance(piece, CallOpened):
            function = {"name": piece.name, "arguments": ""}
            calls.append(
                {"index": piece.index, "id": piece.id, "type": "function", "function": function}
            )
        elif isinstance(piece, CallArguments):
            if calls and calls[-1]["index"] == piece.index:
                calls[-1]["function"]["arguments"] += piece.text
            else:
                calls.append({"index": piece.index, "function": {"arguments": piece.text}})
    if calls:
        delta["tool_calls"] = calls
    return delta
