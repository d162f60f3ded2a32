"""llama-server's `/tokenize`, `/detokenize` and `/apply-template`, for clients that count.

A remote chat app measures its conversation against the window before each turn with
`/apply-template` then `/tokenize` (`add_special` true), the same calls it makes to a
llama-server; the count is the one the chat endpoint's prompt has. They run beside a running
generation (tokenizing reads only the vocabulary), on worker threads: millions of ids, checked,
joined or rendered as JSON on the event loop, kept `/health` waiting for a second.

Request and answer shapes, as llama-server's:
- `/tokenize` `{"content": str, "add_special"?: false, "parse_special"?: true,
  "with_pieces"?: false}` -> `{"tokens": [int]}` (with pieces: `[{"id", "piece"}]`, the piece
  a string, or its bytes when they are not UTF-8 on their own; at most `MOST_WITH_PIECES`
  tokens, beyond which a 400 says how many the text makes)
- `/detokenize` `{"tokens": [int]}` -> `{"content": str}`
- `/apply-template` `{"messages": [...], "tools"?: [...]}` (as the chat endpoint takes them)
  -> `{"prompt": str}`
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localspec.llama.model import TooManyTokensError
from localspec.server.jobs import ServerState, read_request
from localspec.server.openai_api import chat_request
from localspec.server.served_runtime import TargetVocabulary
from localspec.server.wire import ApiError, Fields, token_ids

MOST_WITH_PIECES = 1 << 18
"""The most tokens `/tokenize` answers with their pieces: an object a token, ~200 bytes each
(seven million of them would pass 1.5 GB); the ids alone are bounded by the body's size."""


async def tokenize(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    return await run_in_threadpool(_tokenized, state.runtime.models.target_model, fields)


def _tokenized(model: TargetVocabulary, fields: Fields) -> Response:
    """`/tokenize`'s answer, built and rendered on a worker thread: seven million ids took
    0.8 s to render as JSON, on the event loop."""
    if not isinstance(fields.body.get("content"), str):
        raise ApiError(400, "'content' must be a string", param="content")
    with_pieces = fields.boolean("with_pieces", False)
    try:
        tokens = model.tokenize(
            fields.string("content"),
            add_special=fields.boolean("add_special", False),
            parse_special=fields.boolean("parse_special", True),
            most=MOST_WITH_PIECES if with_pieces else None,
        )
    except TooManyTokensError as exc:
        raise ApiError(
            400,
            f"'content' makes {exc.count} tokens; with 'with_pieces' this server answers at "
            f"most {MOST_WITH_PIECES}: send the text in parts, or leave 'with_pieces' out "
            f"for the ids alone",
            param="content",
            code="too_many_tokens",
        ) from None
    if not with_pieces:
        return JSONResponse({"tokens": tokens})
    return JSONResponse({"tokens": [{"id": t, "piece": _piece(model.piece(t))} for t in tokens]})


def _piece(raw: bytes) -> Any:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # part of a character: llama-server sends the bytes
        return list(raw)


async def detokenize(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    return await run_in_threadpool(_detokenized, state.runtime.models.target_model, fields)


def _detokenized(model: TargetVocabulary, fields: Fields) -> Response:
    """`/detokenize`'s answer, on a worker thread: four million ids kept the event loop (and
    `/health`) busy for 1.2 s."""
    tokens = token_ids(fields.body.get("tokens"))
    if tokens is None:
        raise ApiError(400, "'tokens' must be a list of token ids", param="tokens")
    if any(not 0 <= token < model.n_vocab for token in tokens):
        raise ApiError(400, f"token ids must be in [0, {model.n_vocab})", param="tokens")
    return JSONResponse({"content": model.detokenize(tokens)})


async def apply_template(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    messages, tools = await run_in_threadpool(chat_request, fields, state.runtime)
    definitions = tools.definitions if tools else ()
    text = await run_in_threadpool(state.runtime.prompts.chat_text, messages, definitions)
    return JSONResponse({"prompt": text})
