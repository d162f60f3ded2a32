"""OpenAI-compatible `/v1/chat/completions`, `/v1/completions` and `/v1/models`.

Responses follow OpenAI's shapes (streaming as server-sent events ending in `data: [DONE]`,
`stream_options.include_usage` for a final usage chunk) and add llama.cpp's `timings` and a
`localspec` object with the speculative statistics, which OpenAI clients ignore. A stream has
one chunk per engine step, each with a `localspec` object saying what the step did (`tokens`,
`from_draft`, `drafted`, `source`), so a remote app shows live acceptance and drafted spans.
`/v1/completions` with a `suffix` is fill-in-the-middle, as Continue and minuet send it.
llama-server's `cache_prompt` and `n_cache_reuse` work here too, as its shared schema has them
(`localspec.server.llamacpp_api` says what they do).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from localspec.messages import Message
from localspec.server.constraints import checked, requested_constraint
from localspec.server.jobs import (
    Payload,
    ServerState,
    Wire,
    finished_stats,
    generation_request,
    read_request,
    respond,
)
from localspec.server.messages import chat_message
from localspec.server.served_runtime import ServedRuntime
from localspec.server.tools import ChatCalls, ToolRequest, tool_request
from localspec.server.wire import ApiError, Fields, token_ids
from localspec.speculative.engine import Finished, TextChunk
from localspec.speculative.sources import Span

_OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # what OpenAI's legacy endpoint defaults to


def models(state: ServerState) -> dict[str, Any]:
    """The served model under its id, then each `--model-alias` (the same model, the same
    `meta`): clients that list models before choosing one find the names they were given."""
    settings = state.runtime.settings
    meta = {
        "n_ctx": state.runtime.n_ctx,
        "target": settings.target.name,
        "draft": settings.draft.name if settings.draft else None,
        "fim": state.runtime.prompts.supports_fim,
        # the load settings a client compares before reusing this server
        "n_threads": state.runtime.status.n_threads,
        "target_gpu_layers": settings.target_gpu_layers,
        "draft_gpu_layers": settings.draft_gpu_layers,
        "use_mmap": settings.use_mmap,
        "flash_attn": settings.flash_attn,
        "cache_type_v": settings.cache_type_v,
        "ubatch": state.runtime.status.piece,  # the prompt tokens a call takes
        "draft_n_ctx": settings.draft_ctx_size,
        "mtp": settings.mtp,  # drafts with the target's MTP layers (serve --mtp)
    }
    names = dict.fromkeys((state.model_id, *state.aliases))
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "localspec", "meta": meta}
            for name in names
        ],
    }


def check_model(state: ServerState, fields: Fields) -> None:
    """Any `model` is served by the loaded pair (agents send the names they were configured
    with, and llama-server does the same), unless `serve --strict-model-names`: then a name
    other than the id, an alias or the file name is a 404."""
    name = fields.string("model")
    if name and state.strict_model_names and name not in state.model_names:
        raise ApiError(
            404,
            f"model '{name}' is not served here; this server runs '{state.model_id}' "
            f"(GET /v1/models lists its names; `serve --model-alias {name}` adds this one)",
            param="model",
            code="model_not_found",
        )


def _refuse_unsupported(fields: Fields) -> None:
    fields.refuse("n", 1, "localspec generates one choice per request")
    fields.refuse("best_of", 1, "localspec generates one choice per request")
    fields.refuse("logprobs", False, "log-probabilities are not reported")
    fields.refuse("top_logprobs", 0, "log-probabilities are not reported")
    fields.refuse("echo", False, "the prompt is not echoed")
    fields.refuse("functions", [], "send functions as 'tools' (OpenAI's current form)")
    fields.refuse("function_call", None, "send functions as 'tools', with 'tool_choice'")


def chat_messages(fields: Fields) -> list[Message]:
    raw = fields.objects("messages")
    if not raw:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    return [chat_message(index, item) for index, item in enumerate(raw)]


def chat_request(
    fields: Fields, runtime: ServedRuntime
) -> tuple[list[Message], ToolRequest | None]:
    """The messages and tools of a chat request, read on a worker thread (a long
    conversation takes a while to read, and the event loop answers `/health` meanwhile)."""
    return chat_messages(fields), tool_request(fields, runtime)


def _max_tokens(fields: Fields, default: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        if fields.present(name):
            return fields.integer(name, default, minimum=1)
    return default


def _usage(event: Finished) -> dict[str, Any]:
    stats = event.stats
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
    }


def _finish_reason(event: Finished, called: bool = False) -> str:
    """OpenAI's words: a full context or a spent prompt budget is "length" too
    (`localspec.stop` tells them apart); an answer that ends after tool calls is "tool_calls"."""
    if event.finish_reason in ("length", "context", "prompt_time"):
        return "length"
    return "tool_calls" if called else "stop"


async def chat_completions(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    check_model(state, fields)
    _refuse_unsupported(fields)
    messages, tools = await run_in_threadpool(chat_request, fields, state.runtime)
    requested = requested_constraint(fields)
    if tools is not None:  # a grammar of every tool's schema: off the event loop
        requested = await run_in_threadpool(tools.constraint, requested)
    constraint = await checked(state, requested)
    definitions = tools.definitions if tools else ()
    prompt = await run_in_threadpool(
        state.runtime.prompts.chat_prompt, messages, definitions, fit=True
    )
    max_tokens = _max_tokens(fields, state.defaults.max_tokens or state.runtime.n_ctx)
    request = generation_request(state, fields, prompt, "chat", max_tokens, constraint=constraint)
    calls = ChatCalls() if tools is not None and tools.may_call else None
    wire = _wire(state, fields, chat=True, calls=calls)
    return await respond(http, state, request, wire, stream=fields.boolean("stream"))


async def completions(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    check_model(state, fields)
    _refuse_unsupported(fields)
    default = state.defaults.max_tokens or _OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS
    max_tokens = _max_tokens(fields, default)
    prompt_value = fields.body.get("prompt")
    if isinstance(prompt_value, list) and len(prompt_value) == 1:
        prompt_value = prompt_value[0]
    route = "complete"
    regions: tuple[Span, ...] = ()  # a FIM prompt's parts, for auto's n-gram lookup
    if isinstance(prompt_value, str) and fields.present("suffix"):
        built = await run_in_threadpool(
            state.runtime.prompts.infill_prompt,
            prompt_value,
            fields.string("suffix"),
            max_tokens=max_tokens,
        )
        prompt, route, regions = built.tokens, "infill", built.regions
    elif isinstance(prompt_value, str):
        prompt = await run_in_threadpool(state.runtime.prompts.tokenize, prompt_value, fit=True)
    elif (ids := token_ids(prompt_value)) is not None:
        prompt = ids
    else:
        raise ApiError(
            400, "'prompt' must be a string or a list of token ids (one prompt)", param="prompt"
        )
    constraint = await checked(state, requested_constraint(fields))
    request = generation_request(state, fields, prompt, route, max_tokens, constraint=constraint)
    request = replace(request, regions=regions)
    return await respond(
        http, state, request, _wire(state, fields, chat=False), stream=fields.boolean("stream")
    )


def _wire(
    state: ServerState, fields: Fields, *, chat: bool, calls: ChatCalls | None = None
) -> Wire:
    """OpenAI's shapes: `chat.completion` (deltas after a role-only opening chunk) or
    `text_completion`; streams end with a chunk carrying the finish reason and statistics,
    the usage chunk if `stream_options.include_usage`, then `[DONE]`. With `calls` the
    chat answer's tool calls are read out of its text (`ChatCalls`)."""
    kind = "chat.completion" if chat else "text_completion"
    chunk_kind = "chat.completion.chunk" if chat else kind
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}",
        "created": int(time.time()),
        "model": state.model_id,
    }
    include_usage = fields.mapping("stream_options").boolean("include_usage")

    def text(content: str) -> dict[str, Any]:
        if chat:
            return {"delta": calls.delta(content) if calls else {"content": content}}
        return {"text": content, "logprobs": None}

    def chunk(choice: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        entry = {"index": 0, **choice, "finish_reason": finish}
        return {**head, "object": chunk_kind, "choices": [entry]}

    def answer(event: Finished) -> dict[str, Any]:
        message, called = (
            ChatCalls.message(event.text)
            if calls
            else ({"role": "assistant", "content": event.text}, False)
        )
        whole = {"message": message} if chat else text(event.text)
        choice = {"index": 0, **whole, "finish_reason": _finish_reason(event, called)}
        body = {**head, "object": kind, "choices": [choice], "usage": _usage(event)}
        return {**body, **finished_stats(event)}

    def ending(event: Finished) -> list[Payload]:
        rest = calls.rest() if calls else {}
        events: list[Payload] = [chunk({"delta": rest})] if rest else []
        called = calls is not None and calls.streamed_calls
        last = chunk({"delta": {}} if chat else text(""), _finish_reason(event, called))
        events.append({**last, **finished_stats(event)})
        if include_usage:
            events.append({**head, "object": chunk_kind, "choices": [], "usage": _usage(event)})
        events.append("[DONE]")
        return events

    def piece(event: TextChunk, content: str) -> dict[str, Any]:
        return {**chunk(text(content)), "localspec": step(event)}

    return Wire(
        answer=answer,
        piece=piece,
        ending=ending,
        opening=(chunk({"delta": {"role": "assistant", "content": ""}}),) if chat else (),
        every_step=True,
    )


def step(event: TextChunk) -> dict[str, Any]:
    """What one engine step did: its tokens, how many came from an accepted draft, of how
    many drafted, by which proposer."""
    return {
        "tokens": event.tokens,
        "from_draft": event.from_draft,
        "drafted": event.drafted,
        "source": event.source,
    }
