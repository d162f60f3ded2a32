"""OpenAI chat messages read into `Message`s: text parts, assistant tool calls, tool results.

An assistant turn may carry `tool_calls` (then its `content` may be null) and a `tool` turn
the result of one call (`tool_call_id`, `content`); both go back through the model's chat
template, which renders them in the model's own format. A call's `arguments` arrive as JSON
text, as OpenAI sends them, or as an object, as some clients do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from localspec.messages import Message
from localspec.server.wire import ApiError, Fields
from localspec.tools.calls import ToolCall, new_call_id

_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def chat_message(index: int, item: Mapping[str, Any]) -> Message:
    """`messages[index]` as a `Message`; any malformed part is a 400 naming it."""
    where = f"messages[{index}]"
    role = _ROLES.get(str(item.get("role")))
    if role is None:
        raise ApiError(
            400,
            f"{where}.role must be system, developer, user, assistant or tool",
            param=f"{where}.role",
        )
    fields = Fields(item, prefix=f"{where}.")
    content = item.get("content")
    if role == "assistant" and fields.present("tool_calls"):
        calls = tuple(_call(where, number, raw) for number, raw in enumerate(_calls(fields)))
        text = "" if content is None else message_text(index, content)
        return Message(role, text, tool_calls=calls)
    if role == "tool":
        call_id = fields.string("tool_call_id") or None
        return Message(role, message_text(index, content), tool_call_id=call_id)
    return Message(role, message_text(index, content))


def message_text(index: int, content: Any) -> str:
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(400, f"{where}: only text parts are supported", param=where)
            parts.append(Fields(part, prefix=f"{where}[{number}].").string("text"))
        return "".join(parts)
    raise ApiError(400, f"{where} must be a string or a list of parts", param=where)


def _calls(fields: Fields) -> list[Mapping[str, Any]]:
    calls = fields.objects("tool_calls")
    if not calls:
        raise fields.error("tool_calls", "must be a non-empty list of calls (or left out)")
    return calls


def function_of(fields: Fields) -> tuple[Fields, str]:
    """The `function` object of a tool or a call (its fields) and the function's name."""
    function = fields.body.get("function")
    if not isinstance(function, dict):
        raise fields.error("function", "must be an object with the function's name")
    named = Fields(function, prefix=f"{fields.prefix}function.")
    name = named.string("name")
    if not name:
        raise named.error("name", "must be the function's name")
    return named, name


def _call(where: str, number: int, raw: Mapping[str, Any]) -> ToolCall:
    call = Fields(raw, prefix=f"{where}.tool_calls[{number}].")
    named, name = function_of(call)
    arguments = named.body.get("arguments", "{}")
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, ensure_ascii=False)
    elif not isinstance(arguments, str):
        raise named.error("arguments", "must be the arguments' JSON text (or an object)")
    return ToolCall(call.string("id") or new_call_id(), name, arguments)
