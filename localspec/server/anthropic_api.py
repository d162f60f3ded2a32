"""Anthropic's Messages API: `POST /v1/messages` and `/v1/messages/count_tokens`.

Claude Code speaks only this API (`ANTHROPIC_BASE_URL`). A request's `system`, `messages`
(text, `tool_use` and `tool_result` blocks) and `tools` (`input_schema`) become `Message`s
and function tools rendered by the model's own chat template, the same generation request
the other endpoints build, and the same tool-call constraint and reader (`Blocks`). Answers
are a `message` object with `content` blocks and Anthropic's `stop_reason`s; streams follow
its event sequence (`message_start`, `content_block_start`, `ping`, `content_block_delta`,
`content_block_stop`, `message_delta`, `message_stop`; an `error` event once the headers are
sent; while a long prompt is processed, a `message_delta` that changes nothing every 10 s,
see `STILL_THERE`). Errors take Anthropic's shape
(`{"type": "error", "error": {"type", "message"}}`).

Thinking blocks a client sends back, `thinking`, `metadata`, `cache_control` and the
`anthropic-version`/`anthropic-beta` headers are accepted and ignored: the model does not
think aloud, and the prompt cache works on its own. Images and documents are refused.
Anthropic's server tools are left out of the prompt (`hosted_tools`), and Claude Code's
billing line out of `system` (`client_lines`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localspec.messages import Message
from localspec.server.blocks import BlockEvent, Blocks, Closed, Delta, Opened
from localspec.server.client_lines import messages_system
from localspec.server.constraints import api_constraint, checked
from localspec.server.hosted_tools import messages_server_tool, refuse_only_hosted
from localspec.server.jobs import (
    Payload,
    ServerState,
    Wire,
    finished_stats,
    generation_request,
    read_request,
    respond,
)
from localspec.server.openai_api import check_model
from localspec.server.tools import ToolRequest, checked_tools, function_tool
from localspec.server.wire import ApiError, Fields
from localspec.speculative.engine import Finished, TextChunk
from localspec.tools.calls import CallOpened, ToolCall
from localspec.tools.grammar import Tool, ToolChoice

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_IGNORED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def anthropic_error(error: ApiError) -> dict[str, Any]:
    """`error` in Anthropic's shape: its error type for the status, the message as it is."""
    kind = _ERROR_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


async def messages(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    check_model(state, fields)
    if not fields.present("max_tokens"):
        raise fields.error("max_tokens", "is required (the most tokens to generate)")
    max_tokens = fields.integer("max_tokens", 1, minimum=1)
    conversation, tools = await run_in_threadpool(_read, fields, state)
    definitions = tools.definitions if tools else ()
    prompt = await run_in_threadpool(
        state.runtime.prompts.chat_prompt, conversation, definitions, fit=True
    )
    requested = api_constraint(fields, "output_config")  # structured outputs
    if tools is not None:  # a grammar of every tool's schema: off the event loop
        requested = await run_in_threadpool(tools.constraint, requested)
    constraint = await checked(state, requested)
    stop = fields.strings("stop_sequences") if fields.present("stop_sequences") else None
    request = generation_request(
        state, fields, prompt, "messages", max_tokens, constraint=constraint, stop=stop
    )
    wire = _wire(state, fields, len(prompt), calls=tools is not None and tools.may_call)
    return await respond(http, state, request, wire, stream=fields.boolean("stream"))


async def count_tokens(http: Request, state: ServerState) -> Response:
    """The prompt's length in tokens, as `messages` would build it."""
    fields = await read_request(http, state)
    check_model(state, fields)
    conversation, tools = await run_in_threadpool(_read, fields, state)
    definitions = tools.definitions if tools else ()
    count = await run_in_threadpool(
        state.runtime.prompts.chat_prompt_length, conversation, definitions
    )
    return JSONResponse({"input_tokens": count})


def _read(fields: Fields, state: ServerState) -> tuple[list[Message], ToolRequest | None]:
    """The conversation and tools, read on a worker thread (a long one takes a while)."""
    return [*_system(fields, state), *_conversation(fields)], _tools(fields, state)


def _system(fields: Fields, state: ServerState) -> list[Message]:
    """The `system` text, without the client's volatile lines (`client_lines`) unless
    `serve --keep-client-headers`."""
    value = fields.body.get("system")
    if not state.keep_client_headers:
        kept = messages_system(value)
        if kept is not value and not kept:  # the line was all of it
            return []
        value = kept
    if value is None or value == "":
        return []
    return [Message("system", _text(fields, "system", value))]


def _text(fields: Fields, name: str, value: Any) -> str:
    """A string, or text blocks (their text joined); anything else is a 400 naming it."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise fields.error(name, "must be a string or a list of text blocks")
    parts = []
    for number, block in enumerate(value):
        read = _block(fields, f"{name}[{number}]", block)
        if read.string("type") != "text":
            raise read.error("type", "must be text here (images and documents are not supported)")
        parts.append(read.string("text"))
    return "\n".join(parts)


def _block(fields: Fields, name: str, block: Any) -> Fields:
    if not isinstance(block, dict):
        raise fields.error(name, "must be a content block (an object with a 'type')")
    return Fields(block, prefix=f"{fields.prefix}{name}.")


def _conversation(fields: Fields) -> list[Message]:
    raw = fields.objects("messages")
    if not raw:
        raise fields.error("messages", "must be a non-empty list of messages")
    turns: list[Message] = []
    for index, item in enumerate(raw):
        turn = Fields(item, prefix=f"messages[{index}].")
        role = turn.string("role")
        if role not in ("user", "assistant", "system"):
            raise turn.error("role", "must be user, assistant or system")
        content = item.get("content")
        if isinstance(content, str):
            turns.append(Message(role, content))
        elif role == "system":  # Claude Code sends system turns between the others
            turns.append(Message(role, _text(turn, "content", content)))
        elif role == "user":
            turns.extend(_user_turn(turn, content))
        else:
            turns.append(_assistant_turn(turn, content))
    return turns


def _content_blocks(turn: Fields, content: Any) -> list[Fields]:
    if not isinstance(content, list):
        raise turn.error("content", "must be a string or a list of content blocks")
    return [_block(turn, f"content[{number}]", block) for number, block in enumerate(content)]


def _user_turn(turn: Fields, content: Any) -> list[Message]:
    """Text blocks become a user message, `tool_result` blocks tool messages, in order."""
    out: list[Message] = []
    text: list[str] = []
    for block in _content_blocks(turn, content):
        kind = block.string("type")
        if kind == "text":
            text.append(block.string("text"))
        elif kind == "tool_result":
            if text:
                out.append(Message("user", "\n".join(text)))
                text = []
            result = _text(block, "content", block.body.get("content") or "")
            if block.boolean("is_error"):
                result = f"Error: {result}"
            out.append(Message("tool", result, tool_call_id=block.string("tool_use_id") or None))
        elif kind not in _IGNORED_BLOCKS:
            raise block.error("type", f"{kind!r} is not supported: send text or tool_result")
    if text or not out:
        out.append(Message("user", "\n".join(text)))
    return out


def _assistant_turn(turn: Fields, content: Any) -> Message:
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in _content_blocks(turn, content):
        kind = block.string("type")
        if kind == "text":
            text.append(block.string("text"))
        elif kind == "tool_use":
            arguments = block.body.get("input", {})
            if not isinstance(arguments, dict):
                raise block.error("input", "must be the call's arguments (an object)")
            name = block.string("name")
            if not name:
                raise block.error("name", "must be the tool's name")
            call_id = block.string("id") or f"toolu_{secrets.token_hex(12)}"
            calls.append(ToolCall(call_id, name, json.dumps(arguments, ensure_ascii=False)))
        elif kind not in _IGNORED_BLOCKS:
            raise block.error("type", f"{kind!r} is not supported: send text or tool_use")
    return Message("assistant", "\n".join(text), tool_calls=tuple(calls))


def _tools(fields: Fields, state: ServerState) -> ToolRequest | None:
    """The custom tools; Anthropic's server tools (`web_search_20250305`, ...) are left out
    of the prompt (`hosted_tools`), and a `tool_choice` that forces one is a 400."""
    tools: list[Tool] = []
    left_out: dict[str, str] = {}  # server tools' names -> types
    for index, raw in enumerate(fields.objects("tools")):
        declared = Fields(raw, prefix=f"tools[{index}].")
        kind = declared.string("type", "custom")
        name = declared.string("name")
        if messages_server_tool(kind):
            left_out[name] = kind
            continue
        if kind != "custom":
            raise declared.error(
                "type",
                f"{kind!r} is not supported: only custom tools are (Anthropic's server tools, "
                "such as web_search_20250305, are left out)",
            )
        if not name:
            raise declared.error("name", "must be the tool's name")
        tools.append(function_tool(declared, name, "input_schema"))
    choice, parallel = _choice(fields)
    kinds = tuple(dict.fromkeys(left_out.values()))
    if choice.mode == "function" and choice.name in left_out:
        raise fields.error(
            "tool_choice",
            f"forces {choice.name!r}, the server tool {left_out[choice.name]} this server cannot "
            "run (server tools are left out of the prompt): choose a custom tool, auto or none",
        )
    refuse_only_hosted(fields, choice, len(tools), kinds, "any")
    state.left_out.note("/v1/messages", kinds)
    return checked_tools(fields, state.runtime, tuple(tools), choice, parallel)


def _choice(fields: Fields) -> tuple[ToolChoice, bool]:
    """`tool_choice` (auto, any, tool with its name, none) and whether several calls may
    follow each other: one unless `disable_parallel_tool_use` is false (a small model
    allowed more repeats its call)."""
    value = fields.body.get("tool_choice")
    if value is None:
        return ToolChoice("auto"), False
    if not isinstance(value, dict):
        raise fields.error("tool_choice", 'must be an object such as {"type": "auto"}')
    choice = Fields(value, prefix="tool_choice.")
    parallel = choice.present("disable_parallel_tool_use") and not choice.boolean(
        "disable_parallel_tool_use"
    )
    kind = choice.string("type")
    if kind == "auto":
        return ToolChoice("auto"), parallel
    if kind == "none":
        return ToolChoice("none"), parallel
    if kind == "any":
        return ToolChoice("required"), parallel
    if kind == "tool":
        name = choice.string("name")
        if not name:
            raise choice.error("name", "must name the tool to call")
        return ToolChoice("function", name), parallel
    raise choice.error("type", "must be auto, any, tool or none")


def _stop_reason(event: Finished, called: bool) -> tuple[str, str | None]:
    """A limit first (a call cut off by it is incomplete), then a call, then a stop string."""
    stats = event.stats
    if event.finish_reason in ("length", "context", "prompt_time"):
        return "max_tokens", None
    if called:
        return "tool_use", None
    if stats.stop_word:
        return "stop_sequence", stats.stop_word
    return "end_turn", None


def _usage(event: Finished) -> dict[str, int]:
    """Anthropic counts the prompt's cached tokens apart from those it processed."""
    stats = event.stats
    return {
        "input_tokens": stats.prompt_tokens - stats.cached_tokens,
        "cache_read_input_tokens": stats.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": stats.generated_tokens,
    }


def _content(closed: Closed) -> dict[str, Any]:
    if closed.call is None:
        return {"type": "text", "text": closed.text}
    return {**_tool_use(closed.call), "input": _arguments(closed.text)}


def _tool_use(call: CallOpened) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}


def _arguments(text: str) -> Any:
    """A call's arguments as data; the constraint makes them JSON, but a call cut off by
    max_tokens is not complete."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _wire(state: ServerState, fields: Fields, prompt_tokens: int, *, calls: bool) -> Wire:
    message_id = f"msg_{secrets.token_hex(12)}"
    model = fields.string("model") or state.model_id
    head = {"id": message_id, "type": "message", "role": "assistant", "model": model}
    blocks = Blocks(calls=calls)

    def answer(event: Finished) -> dict[str, Any]:
        whole = Blocks(calls=calls)
        read = [*whole.feed(event.text), *whole.close()]
        content = [_content(item) for item in read if isinstance(item, Closed)]
        reason, sequence = _stop_reason(event, whole.called)
        body = {"content": content, "stop_reason": reason, "stop_sequence": sequence}
        return {**head, **body, "usage": _usage(event), **finished_stats(event)}

    def piece(_event: TextChunk, text: str) -> list[Payload]:
        return [_event_of(item) for item in blocks.feed(text)]

    def ending(event: Finished) -> list[Payload]:
        events: list[Payload] = [_event_of(item) for item in blocks.close()]
        reason, sequence = _stop_reason(event, blocks.called)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        last = {"type": "message_delta", "delta": delta, "usage": _usage(event)}
        events.append({**last, **finished_stats(event)})
        events.append({"type": "message_stop"})
        return events

    usage = {"input_tokens": prompt_tokens, "output_tokens": 0}
    opening: tuple[Payload, ...] = (
        {"type": "message_start", "message": {**head, **_empty(usage)}},
        {"type": "ping"},
    )
    return Wire(
        answer=answer,
        piece=piece,
        ending=ending,
        opening=opening,
        named=True,
        failure=anthropic_error,
        keepalive=STILL_THERE,
    )


STILL_THERE: Payload = {
    "type": "message_delta",
    "delta": {"stop_reason": None, "stop_sequence": None},
    "usage": {"output_tokens": 0},
}
"""What a stream sends every 10 s while its prompt is processed: a `message_delta` that
changes nothing. Not `ping`: Anthropic's SDKs drop pings before the caller sees them, and
Claude Code (2.1.197, interactive) aborts a stream after 300 s without an event it sees and
asks again without streaming, which also gives up after 300 s: on a CPU, a first prompt of
~24k tokens (13 min) was asked four times."""


def _empty(usage: Mapping[str, int]) -> dict[str, Any]:
    return {"content": [], "stop_reason": None, "stop_sequence": None, "usage": dict(usage)}


def _event_of(item: BlockEvent) -> dict[str, Any]:
    if isinstance(item, Opened):
        block = _tool_use(item.call) if item.call else {"type": "text", "text": ""}
        return {"type": "content_block_start", "index": item.index, "content_block": block}
    if isinstance(item, Delta):
        delta = (
            {"type": "text_delta", "text": item.text}
            if item.kind == "text"
            else {"type": "input_json_delta", "partial_json": item.text}
        )
        return {"type": "content_block_delta", "index": item.index, "delta": delta}
    return {"type": "content_block_stop", "index": item.index}
