"""The Responses API's `input`, read into `Message`s.

`input` is a string (one user message) or a list of items: messages (`{"role", "content"}`,
with or without `"type": "message"`; content a string or `input_text` / `output_text` parts),
`function_call` items (an assistant's call, with its `namespace` where the function has one;
consecutive ones join the assistant turn before them, as the chat template renders one turn
with several calls) and `function_call_output` items (a call's result). `reasoning` items,
which clients send back unchanged, are skipped: this model does not reason aloud. Anything
else is a 400 naming the item.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from localspec.messages import Message
from localspec.server.wire import Fields
from localspec.tools.calls import ToolCall

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _same(_namespace: str | None, name: str) -> str:
    return name


def conversation(
    fields: Fields, model_name: Callable[[str | None, str], str] = _same
) -> list[Message]:
    """The `input` as messages; a call's function is named as the model was offered it
    (`model_name(namespace, name)`: a namespaced function's, `responses_tools.Names`)."""
    value = fields.body.get("input")
    if isinstance(value, str):
        return [Message("user", value)]
    if not isinstance(value, list) or not value:
        raise fields.error("input", "must be a string or a non-empty list of input items")
    turns = _Turns()
    for index, raw in enumerate(value):
        if not isinstance(raw, dict):
            raise fields.error(f"input[{index}]", "must be an input item (an object)")
        item = Fields(raw, prefix=f"input[{index}].")
        kind = item.string("type", "message")
        if kind == "message":
            turns.add(_message(item))
        elif kind == "function_call":
            turns.call(_call(item, model_name))
        elif kind == "function_call_output":
            turns.add(Message("tool", _output(item), tool_call_id=item.string("call_id") or None))
        elif kind != "reasoning":
            raise item.error(
                "type",
                f"{kind!r} is not supported: send message, function_call or "
                "function_call_output items",
            )
    return turns.done()


def _message(item: Fields) -> Message:
    role = _ROLES.get(item.string("role"))
    if role is None:
        raise item.error("role", "must be user, assistant, system or developer")
    return Message(role, _text(item, "content"))


def _text(item: Fields, name: str) -> str:
    value = item.body.get(name)
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise item.error(name, "must be a string or a list of text parts")
    parts = []
    for number, part in enumerate(value):
        read = Fields(
            part if isinstance(part, Mapping) else {}, prefix=f"{item.prefix}{name}[{number}]."
        )
        kind = read.string("type")
        if kind not in _TEXT_PARTS:
            raise read.error(
                "type", f"{kind!r} is not supported: only text parts are (input_text, output_text)"
            )
        parts.append(read.string("refusal" if kind == "refusal" else "text"))
    return "".join(parts)


def _call(item: Fields, model_name: Callable[[str | None, str], str]) -> ToolCall:
    name = item.string("name")
    if not name:
        raise item.error("name", "must be the function's name")
    call_id = item.string("call_id")
    if not call_id:
        raise item.error("call_id", "must be the call's id (its output names it)")
    name = model_name(item.string("namespace") or None, name)
    return ToolCall(call_id, name, item.string("arguments", "{}"))


class _Turns:
    """The conversation as it is read: the calls that follow an assistant turn are gathered
    in a list and joined to it once, when the next turn starts (rebuilding the turn at each
    call made 60,000 calls take seconds on the event loop: quadratic)."""

    def __init__(self) -> None:
        self.turns: list[Message] = []
        self.calls: list[ToolCall] = []

    def add(self, turn: Message) -> None:
        self._join()
        self.turns.append(turn)

    def call(self, call: ToolCall) -> None:
        if not self.calls and (not self.turns or self.turns[-1].role != "assistant"):
            self.turns.append(Message("assistant", ""))
        self.calls.append(call)

    def done(self) -> list[Message]:
        self._join()
        return self.turns

    def _join(self) -> None:
        if self.calls:
            last = self.turns[-1]
            calls = (*last.tool_calls, *self.calls)
            self.turns[-1] = Message("assistant", last.content, tool_calls=calls)
            self.calls = []


def _output(item: Fields) -> str:
    value: Any = item.body.get("output")
    if value is None:
        raise item.error("output", "must be the call's result (a string)")
    return _text(item, "output")
