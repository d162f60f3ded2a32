"""OpenAI's Responses API: `POST /v1/responses`, which Codex CLI speaks (and only it).

Stateless like Ollama's, plus `previous_response_id` for responses this server produced
since it started (`ResponseStore`). `input` (a string, or `message`, `function_call` and
`function_call_output` items), `instructions` and function `tools` become `Message`s and
tools rendered by the model's own chat template; the generation request, the tool-call
constraint and the call reader (`Blocks`) are the ones every endpoint uses. `text.format`
is chat completions' `response_format` under another name. Streams follow the Responses
event sequence (`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`, ..., `response.completed` or
`response.incomplete`), each event with its `sequence_number`. Reasoning items a client sends
back are accepted and ignored. Functions grouped under a `namespace` are offered as functions
and their calls come back with their namespace; hosted tools (`web_search`, ...) are left out
of the prompt, and the answer's `metadata` names them (`localspec.server.responses_tools`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from localspec.messages import Message
from localspec.server.blocks import BlockEvent, Blocks, Closed, Delta, Opened
from localspec.server.constraints import api_constraint, checked
from localspec.server.hosted_tools import METADATA_KEY
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
from localspec.server.responses_input import conversation
from localspec.server.responses_tools import Names, ResponsesTools, responses_tools
from localspec.server.wire import ApiError, Fields
from localspec.speculative.engine import Finished, TextChunk
from localspec.tools.calls import CallOpened, ToolCall


async def responses(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    check_model(state, fields)
    fields.refuse("conversation", None, "conversations are not kept: use previous_response_id")
    fields.refuse("top_logprobs", 0, "log-probabilities are not reported")
    history, declared = await run_in_threadpool(_conversation, fields, state)
    tools = declared.request
    turns = [*_instructions(fields), *history]
    requested = api_constraint(fields, "text")
    if tools is not None:  # a grammar of every tool's schema: off the event loop
        requested = await run_in_threadpool(tools.constraint, requested)
    constraint = await checked(state, requested)
    definitions = tools.definitions if tools else ()
    prompt = await run_in_threadpool(
        state.runtime.prompts.chat_prompt, turns, definitions, fit=True
    )
    max_tokens = fields.integer(
        "max_output_tokens", state.defaults.max_tokens or state.runtime.n_ctx, minimum=1
    )
    request = generation_request(
        state, fields, prompt, "responses", max_tokens, constraint=constraint
    )
    wire = _wire(state, fields, history, declared, calls=tools is not None and tools.may_call)
    return await respond(http, state, request, wire, stream=fields.boolean("stream"))


def _conversation(fields: Fields, state: ServerState) -> tuple[list[Message], ResponsesTools]:
    """The conversation and the tools, read on a worker thread: an input of 100,000 items
    takes seconds to read. An input of reasoning items only (they are skipped) is refused
    here, where the chat template would have failed on no messages."""
    tools = responses_tools(fields, state.runtime)
    state.left_out.note("/v1/responses", tools.left_out)
    history = [*_previous(fields, state), *conversation(fields, tools.names.model_name)]
    if not history:
        raise fields.error(
            "input",
            "holds only reasoning items, which this server skips: send at least one message "
            "or function_call_output item (or a previous_response_id)",
        )
    return history, tools


def _previous(fields: Fields, state: ServerState) -> tuple[Message, ...]:
    response_id = fields.string("previous_response_id")
    if not response_id:
        return ()
    earlier = state.responses.get(response_id)
    if earlier is None:
        raise ApiError(
            404,
            f"previous response '{response_id}' is not known here: this server keeps the "
            f"last {state.responses.max_responses} stored responses since it started; send "
            f"the whole conversation as 'input' instead",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return earlier


def _instructions(fields: Fields) -> list[Message]:
    text = fields.string("instructions")
    return [Message("system", text)] if text else []


def _usage(event: Finished) -> dict[str, Any]:
    stats = event.stats
    return {
        "input_tokens": stats.prompt_tokens,
        "input_tokens_details": {"cached_tokens": stats.cached_tokens},
        "output_tokens": stats.generated_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
    }


class _Output:
    """The response's output items as they are built: ids, texts, and the calls made, each
    named as the client declared it (`names`: with its namespace)."""

    def __init__(self, names: Names) -> None:
        self.items: list[dict[str, Any]] = []
        self.ids: dict[int, str] = {}
        self.names = names

    def opened(self, item: Opened) -> dict[str, Any]:
        if item.call is None:
            self.ids[item.index] = f"msg_{secrets.token_hex(12)}"
            return _message(self.ids[item.index], "", "in_progress")
        self.ids[item.index] = f"fc_{secrets.token_hex(12)}"
        return self._call(item.index, item.call, "", "in_progress")

    def closed(self, item: Closed) -> dict[str, Any]:
        if item.index not in self.ids:
            self.opened(Opened(item.index, item.kind, item.call))
        if item.call is None:
            whole = _message(self.ids[item.index], item.text, "completed")
        else:
            whole = self._call(item.index, item.call, item.text, "completed")
        self.items.append(whole)
        return whole

    def messages(self) -> list[Message]:
        """The output as a conversation turn, for `previous_response_id`."""
        text = "".join(
            part["text"]
            for item in self.items
            if item["type"] == "message"
            for part in item["content"]
        )
        calls = tuple(
            ToolCall(
                item["call_id"],
                self.names.model_name(item.get("namespace"), item["name"]),
                item["arguments"],
            )
            for item in self.items
            if item["type"] == "function_call"
        )
        return [Message("assistant", text, tool_calls=calls)]

    def _call(self, index: int, call: CallOpened, arguments: str, status: str) -> dict[str, Any]:
        return {
            "id": self.ids[index],
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            **self.names.call_fields(call.name),
            "arguments": arguments,
        }


def _message(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [_part(text)] if status == "completed" else []
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _wire(
    state: ServerState,
    fields: Fields,
    history: list[Message],
    declared: ResponsesTools,
    *,
    calls: bool,
) -> Wire:
    response_id = f"resp_{secrets.token_hex(12)}"
    store = fields.boolean("store", True)
    head = _head(state, fields, response_id, declared.left_out)
    blocks = Blocks(calls=calls)
    streamed = _Output(declared.names)
    sequence = iter(range(1 << 62))

    def numbered(payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "sequence_number": next(sequence)}

    def finish(event: Finished, output: _Output) -> dict[str, Any]:
        if store:
            state.responses.put(response_id, [*history, *output.messages()])
        limited = event.finish_reason in ("length", "context", "prompt_time")
        status = "incomplete" if limited else "completed"
        details = {"reason": "max_output_tokens"} if limited else None
        body = {"status": status, "incomplete_details": details, "output": output.items}
        return {**head, **body, "usage": _usage(event), **finished_stats(event)}

    def answer(event: Finished) -> dict[str, Any]:
        whole, output = Blocks(calls=calls), _Output(declared.names)
        for item in [*whole.feed(event.text), *whole.close()]:
            if isinstance(item, Closed):
                output.closed(item)
        return finish(event, output)

    def piece(_event: TextChunk, text: str) -> list[Payload]:
        return [numbered(e) for item in blocks.feed(text) for e in _events(streamed, item)]

    def ending(event: Finished) -> list[Payload]:
        events = [numbered(e) for item in blocks.close() for e in _events(streamed, item)]
        response = finish(event, streamed)
        kind = f"response.{response['status']}"
        return [*events, numbered({"type": kind, "response": response})]

    def failure(error: ApiError) -> Payload:
        return numbered(
            {"type": "error", "code": error.code, "message": error.message, "param": error.param}
        )

    started = {**head, "status": "in_progress", "output": [], "usage": None}
    opening: tuple[Payload, ...] = (
        numbered({"type": "response.created", "response": started}),
        numbered({"type": "response.in_progress", "response": started}),
    )
    return Wire(
        answer=answer, piece=piece, ending=ending, opening=opening, named=True, failure=failure
    )


def _head(
    state: ServerState, fields: Fields, response_id: str, left_out: tuple[str, ...]
) -> dict[str, Any]:
    """The fields a response repeats from its request; `metadata` also names the hosted
    tools `left_out` of the prompt."""
    body: Mapping[str, Any] = fields.body
    metadata = dict(fields.mapping("metadata").body)
    if left_out:
        metadata[METADATA_KEY] = ",".join(left_out)
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "error": None,
        "model": fields.string("model") or state.model_id,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "parallel_tool_calls": fields.boolean("parallel_tool_calls"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "text": body.get("text") or {"format": {"type": "text"}},
        "store": fields.boolean("store", True),
        "truncation": "disabled",
        "reasoning": {"effort": None, "summary": None},
        "metadata": metadata,
    }


def _events(output: _Output, item: BlockEvent) -> list[dict[str, Any]]:
    """The Responses events for one block event: an output item added (a message also gets
    its text part), its deltas, and its completion."""
    if isinstance(item, Opened):
        added = {
            "type": "response.output_item.added",
            "output_index": item.index,
            "item": output.opened(item),
        }
        if item.call is not None:
            return [added]
        part = {
            "type": "response.content_part.added",
            **_where(output, item.index),
            "part": _part(""),
        }
        return [added, part]
    if isinstance(item, Delta):
        where = _where(output, item.index)
        if item.kind == "text":
            return [
                {"type": "response.output_text.delta", **where, "delta": item.text, "logprobs": []}
            ]
        del where["content_index"]
        return [{"type": "response.function_call_arguments.delta", **where, "delta": item.text}]
    whole = output.closed(item)
    done = {"type": "response.output_item.done", "output_index": item.index, "item": whole}
    where = _where(output, item.index)
    if item.call is not None:
        del where["content_index"]
        arguments = {
            "type": "response.function_call_arguments.done",
            **where,
            "arguments": item.text,
            "name": whole["name"],
        }
        return [arguments, done]
    text = {"type": "response.output_text.done", **where, "text": item.text, "logprobs": []}
    part = {"type": "response.content_part.done", **where, "part": _part(item.text)}
    return [text, part, done]


def _where(output: _Output, index: int) -> dict[str, Any]:
    return {"item_id": output.ids[index], "output_index": index, "content_index": 0}
