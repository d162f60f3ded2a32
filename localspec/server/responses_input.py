"""The Responses API's `input`, read into `Message`s.

`input` is a string (one user message) or a list of items: messages (`{"role", "content"}`,
with or without `"type": "message"`; content a string or `input_text` / `output_text` parts),
`function_call` items (an assistant's call; consecutive ones join the assistant turn before
them, as the chat template renders one turn with several calls) and `function_call_output`
items (a call's result). `reasoning` items, which clients send back unchanged, are skipped:
this model does not reason aloud. Anything else is a 400 naming the item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localspec.messages import Message
from localspec.server.wire import Fields
from localspec.tools.calls import ToolCall

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def conversation(fields: Fields) -> list[Message]:
    value = fields.body.get("input")
    if isinstance(value, str):
        return [Message("user", value)]
    if not isinstance(value, list) or not value:
        raise fields.error("input", "must be a string or a non-empty list of input items")
    turns: list[Message] = []
    for index, raw in enumerate(value):
        if not isinstance(raw, dict):
            raise fields.error(f"input[{index}]", "must be an input item (an object)")
        item = Fields(raw, prefix=f"input[{index}].")
        kind = item.string("type", "message")
        if kind == "message":
            turns.append(_message(item))
        elif kind == "function_call":
            _add_call(turns, _call(item))
        elif kind == "function_call_output":
            turns.append(
                Message("tool", _output(item), tool_call_id=item.string("call_id") or None)
            )
        elif kind != "reasoning":
            raise item.error(
                "type",
                f"{kind!r} is not supported: send message, function_call or "
                "function_call_output items",
            )
    return turns


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


def _call(item: Fields) -> ToolCall:
    name = item.string("name")
    if not name:
        raise item.error("name", "must be the function's name")
    call_id = item.string("call_id")
    if not call_id:
        raise item.error("call_id", "must be the call's id (its output names it)")
    return ToolCall(call_id, name, item.string("arguments", "{}"))


def _add_call(turns: list[Message], call: ToolCall) -> None:
    last = turns[-1] if turns else None
    if last is not None and last.role == "assistant":
        turns[-1] = Message("assistant", last.content, tool_calls=(*last.tool_calls, call))
    else:
        turns.append(Message("assistant", "", tool_calls=(call,)))


def _output(item: Fields) -> str:
    value: Any = item.body.get("output")
    if value is None:
        raise item.error("output", "must be the call's result (a string)")
    return _text(item, "output")
