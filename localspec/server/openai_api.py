"""OpenAI-compatible `/v1/chat/completions`, `/v1/completions` and `/v1/models`.

Responses follow OpenAI's shapes (streaming as server-sent events ending in `data: [DONE]`,
`stream_options.include_usage` for a final usage chunk) and add llama.cpp's `timings` and a
`localspec` object with the speculative statistics, which OpenAI clients ignore.
`/v1/completions` with a `suffix` is fill-in-the-middle, as Continue and minuet send it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localspec.runtime import Message
from localspec.server.jobs import (
    ServerState,
    cancel_on_disconnect,
    events,
    finished_stats,
    sse,
    submit,
)
from localspec.server.wire import (
    ApiError,
    Fields,
    parse_json,
    sampling_from,
    spec_from,
    token_ids,
)
from localspec.speculative.engine import Finished, GenerationRequest, TextChunk

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # what OpenAI's legacy endpoint defaults to


def models(state: ServerState) -> dict[str, Any]:
    settings = state.runtime.settings
    return {
        "object": "list",
        "data": [
            {
                "id": state.model_id,
                "object": "model",
                "created": 0,
                "owned_by": "localspec",
                "meta": {
                    "n_ctx": state.runtime.n_ctx,
                    "target": settings.target.name,
                    "draft": settings.draft.name if settings.draft else None,
                    "fim": state.runtime.supports_fim,
                },
            }
        ],
    }


def check_model(state: ServerState, fields: Fields) -> None:
    """Accept the served model's id (or its file name); anything else is a 404."""
    name = fields.string("model")
    target = state.runtime.settings.target
    if name and name not in (state.model_id, target.name, target.stem, "default"):
        raise ApiError(
            404,
            f"model '{name}' is not served here; this server runs '{state.model_id}' "
            f"(GET /v1/models lists it)",
            param="model",
            code="model_not_found",
        )


def _refuse_unsupported(fields: Fields) -> None:
    fields.refuse("n", 1, "localspec generates one choice per request")
    fields.refuse("best_of", 1, "localspec generates one choice per request")
    fields.refuse("logprobs", False, "log-probabilities are not reported")
    fields.refuse("top_logprobs", 0, "log-probabilities are not reported")
    fields.refuse("echo", False, "the prompt is not echoed")
    fields.refuse("tools", [], "tool calling is not supported")
    fields.refuse("functions", [], "function calling is not supported")
    response_format = fields.body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise ApiError(
            400, "'response_format' other than text is not supported", param="response_format"
        )


def _message_text(index: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(
                    400,
                    f"messages[{index}].content: only text parts are supported",
                    param="messages",
                )
            parts.append(Fields(part).string("text"))
        return "".join(parts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of parts")


def chat_messages(fields: Fields) -> list[Message]:
    raw = fields.objects("messages")
    if not raw:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    messages = []
    for index, item in enumerate(raw):
        role = _ROLES.get(str(item.get("role")))
        if role is None:
            raise ApiError(
                400,
                f"messages[{index}].role must be system, developer, user or assistant",
                param="messages",
            )
        messages.append(Message(role, _message_text(index, item.get("content"))))
    return messages


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


def _finish_reason(event: Finished) -> str:
    return "length" if event.finish_reason in ("length", "context") else "stop"


async def chat_completions(http: Request, state: ServerState) -> Response:
    fields = Fields(parse_json(await http.body()))
    check_model(state, fields)
    _refuse_unsupported(fields)
    prompt = state.runtime.chat_prompt(chat_messages(fields))
    request = _request(fields, state, prompt, "chat", state.max_tokens_default)
    return await _respond(
        http,
        state,
        fields,
        request,
        kind="chat.completion",
        piece=lambda text: {"delta": {"content": text}},
        whole=lambda text: {"message": {"role": "assistant", "content": text}},
        opening={"delta": {"role": "assistant", "content": ""}},
    )


async def completions(http: Request, state: ServerState) -> Response:
    fields = Fields(parse_json(await http.body()))
    check_model(state, fields)
    _refuse_unsupported(fields)
    max_tokens = _max_tokens(fields, _OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS)
    prompt_value = fields.body.get("prompt")
    if isinstance(prompt_value, list) and len(prompt_value) == 1:
        prompt_value = prompt_value[0]
    route = "complete"
    if isinstance(prompt_value, str) and fields.present("suffix"):
        prompt = state.runtime.infill_prompt(
            prompt_value, fields.string("suffix"), max_tokens=max_tokens
        ).tokens
        route = "infill"
    elif isinstance(prompt_value, str):
        prompt = state.runtime.tokenize(prompt_value)
    elif (ids := token_ids(prompt_value)) is not None:
        prompt = ids
    else:
        raise ApiError(
            400, "'prompt' must be a string or a list of token ids (one prompt)", param="prompt"
        )
    request = _request(fields, state, prompt, route, max_tokens)
    return await _respond(
        http,
        state,
        fields,
        request,
        kind="text_completion",
        piece=lambda text: {"text": text, "logprobs": None},
        whole=lambda text: {"text": text, "logprobs": None},
        opening=None,
    )


def _request(
    fields: Fields, state: ServerState, prompt: list[int], route: str, max_tokens: int
) -> GenerationRequest:
    check_prompt(state, prompt)
    return GenerationRequest(
        prompt=prompt,
        max_tokens=_max_tokens(fields, max_tokens),
        sampling=sampling_from(fields),
        spec=spec_from(fields, state.spec),
        stop=fields.strings("stop"),
        ignore_eos=fields.boolean("ignore_eos"),  # llama.cpp's extension, for benchmarks
        route=route,
    )


def check_prompt(state: ServerState, prompt: list[int]) -> None:
    """Refuse up front what the engine would refuse, so the client gets a proper status."""
    if not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    vocabulary_size = state.runtime.target_model.n_vocab
    if any(not 0 <= token < vocabulary_size for token in prompt):
        raise ApiError(400, f"token ids must be in [0, {vocabulary_size})", param="prompt")
    n_ctx = state.runtime.n_ctx
    if len(prompt) >= n_ctx:
        raise ApiError(
            400,
            f"the prompt is {len(prompt)} tokens but the context window holds {n_ctx} (and at "
            f"least one token must be left to generate); localspec never truncates prompts: "
            f"shorten it or restart the server with a larger --ctx-size",
            param="prompt",
            code="context_length_exceeded",
        )


async def _respond(
    http: Request,
    state: ServerState,
    fields: Fields,
    request: GenerationRequest,
    *,
    kind: str,
    piece: Callable[[str], dict[str, Any]],
    whole: Callable[[str], dict[str, Any]],
    opening: dict[str, Any] | None,
) -> Response:
    job = submit(state, list(request.prompt), request)
    head = {
        "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{secrets.token_hex(12)}",
        "created": int(time.time()),
        "model": state.model_id,
    }
    if not fields.boolean("stream"):
        async with cancel_on_disconnect(http, job):
            async for event in events(job):
                if isinstance(event, Finished):
                    choice = {
                        "index": 0,
                        **whole(event.text),
                        "finish_reason": _finish_reason(event),
                    }
                    answer = {**head, "object": kind, "choices": [choice], "usage": _usage(event)}
                    return JSONResponse({**answer, **finished_stats(event)})
        raise ApiError(500, "the generation ended without a result", kind="server_error")

    options = fields.body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else kind
    stream = events(job)
    # wait for the first event here so that errors before any output get a real status code
    first = await anext(stream)

    async def body() -> AsyncIterator[bytes]:
        def chunk(choice: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            entry = {"index": 0, **choice, "finish_reason": finish}
            return {**head, "object": chunk_kind, "choices": [entry]}

        try:
            if opening is not None:
                yield sse(chunk(opening))
            event = first
            while True:
                if isinstance(event, TextChunk) and event.text:
                    yield sse(chunk(piece(event.text)))
                elif isinstance(event, Finished):
                    empty = {"delta": {}} if opening is not None else piece("")
                    yield sse({**chunk(empty, _finish_reason(event)), **finished_stats(event)})
                    if include_usage:
                        usage = {**head, "object": chunk_kind, "choices": []}
                        yield sse({**usage, "usage": _usage(event)})
                    yield sse("[DONE]")
                    return
                event = await anext(stream)
        except ApiError as exc:  # headers are sent: the error travels as an event
            yield sse(exc.body())
        finally:
            await stream.aclose()

    return StreamingResponse(body(), media_type="text/event-stream")
