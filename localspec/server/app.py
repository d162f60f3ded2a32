"""The Starlette application: routes, error bodies, and the worker's lifetime.

Every failure a client can cause is a JSON error in OpenAI's shape with a 4xx status; a bug
is a 500 with a generic message (the traceback goes to the server's log, never the client),
and the server keeps serving either way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec import __version__
from localspec.errors import LocalspecError
from localspec.server import (
    anthropic_api,
    llamacpp_api,
    openai_api,
    responses_api,
    tokens_api,
)
from localspec.server.admission import release
from localspec.server.body import MAX_DEPTH
from localspec.server.jobs import ServerState
from localspec.server.metrics import CONTENT_TYPE
from localspec.server.record import Recorder, Recording
from localspec.server.security import LocalOnly
from localspec.server.wire import ApiError, api_error, generation_settings

if TYPE_CHECKING:
    from localspec.runtime_status import SavedStates

_log = logging.getLogger(__name__)

Handler = Callable[[Request, ServerState], Awaitable[Response]]


def prompt_cache_props(cache: SavedStates) -> dict[str, int]:
    """The prompt cache's byte limit (`serve --cache-ram`), saved states and their bytes."""
    return {"limit_bytes": cache.limit_bytes, "entries": cache.entries, "bytes": cache.bytes}


ErrorShape = Callable[[ApiError], dict[str, Any]]


def _error_response(error: ApiError, shape: ErrorShape = ApiError.body) -> JSONResponse:
    return JSONResponse(shape(error), status_code=error.status, headers=error.headers)


def _progress(progress: tuple[int, int]) -> dict[str, int]:
    processed, total = progress
    return {"processed": processed, "total": total}


def prompt_store_props(store: SavedStates) -> dict[str, int]:
    """The on-disk prompt states (`serve --cache-disk`): the byte limit, files and bytes."""
    return {
        "limit_bytes": store.limit_bytes,
        "entries": store.entries,
        "bytes": store.bytes,
        "min_tokens": store.min_tokens,
    }


def _flash_attn(asked: bool | None) -> str:
    """The target context's flash attention as `/props` says it (llama-server's -fa values)."""
    return "auto" if asked is None else ("on" if asked else "off")


def build_app(
    state: ServerState,
    *,
    token: str | None,
    extra_hosts: Iterable[str] = (),
    recorder: Recorder | None = None,
) -> Starlette:
    """The app; with a `recorder`, the bodies of authorised generation requests are kept
    for `bench agent` (`serve --record`)."""

    def endpoint(
        handler: Handler, shape: ErrorShape = ApiError.body
    ) -> Callable[[Request], Awaitable[Response]]:
        """`handler` with the failures a client causes as JSON errors in its API's `shape`."""

        async def call(request: Request) -> Response:
            try:
                return await handler(request, state)
            except ApiError as exc:
                return _error_response(exc, shape)
            except LocalspecError as exc:
                return _error_response(api_error(exc), shape)
            finally:
                release(request)  # its body's turn, if the handler did not end it

        return call

    anthropic = anthropic_api.anthropic_error

    async def health(_request: Request) -> Response:
        worker, status = state.worker, state.runtime.status
        return JSONResponse(
            {
                "status": "ok" if worker.ready else "loading",
                "ready": worker.ready,
                "version": __version__,
                "model": state.model_id,
                "busy": worker.busy,
                "waiting": worker.waiting,
                "cancelled": worker.cancelled,
                "max_waiting": worker.max_waiting,
                "slots": len(worker.slots),
                "metrics": state.metrics is not None,  # GET /metrics (`serve --metrics`)
                # generations an editor's request interrupted (they went on after it)
                "preempted": worker.preempted,
                # processed while idle after a time budget cut a prompt short (in no timings)
                "idle_prompt_tokens": worker.idle_prompt_tokens,
                # cached tokens a prompt left behind, kept in host memory for a later one
                "parked_tokens": status.parked_tokens,
                "parked_bytes": status.parked_bytes,
                # a long prompt being processed (an agent's first turn takes minutes on a CPU)
                "prompt_progress": _progress(status.prompt_progress),
            }
        )

    async def metrics(_request: Request) -> Response:
        """Prometheus' text format (`localspec.server.metrics`), with `serve --metrics`."""
        if state.metrics is None:
            off = "metrics are off: start the server with --metrics"
            return _error_response(ApiError(404, off, kind="not_found_error"))
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    async def models(_request: Request) -> Response:
        return JSONResponse(openai_api.models(state))

    async def props(_request: Request) -> Response:
        """llama-server's `/props`: the defaults requests get, and the limits on a body;
        `n_cache_reuse` (`--cache-reuse`) only takes effect where `cache_shift` is true."""
        runtime = state.runtime
        status = runtime.status
        return JSONResponse(
            {
                "default_generation_settings": generation_settings(state.defaults, runtime.n_ctx),
                "total_slots": len(state.worker.slots),
                "model_alias": state.model_id,
                "model_path": str(runtime.settings.target),
                "build_info": f"localspec {__version__}",
                "max_body": state.max_body,
                "max_json_depth": MAX_DEPTH,
                "max_waiting": state.worker.max_waiting,
                "draft_n_ctx": runtime.settings.draft_ctx_size,  # --draft-ctx-size
                "n_cache_reuse": runtime.settings.cache_reuse,
                "cache_shift": status.can_shift,
                "flash_attn": _flash_attn(status.flash_attn),
                "prompt_cache": prompt_cache_props(status.prompt_cache),
                "prompt_store": prompt_store_props(status.prompt_store),
            }
        )

    async def slots(_request: Request) -> Response:
        """llama-server's `/slots`: each slot, whether it is processing, what it caches."""
        return JSONResponse(state.worker.slots.describe())

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _error_response(ApiError(exc.status_code, str(exc.detail), kind=kind))

    async def internal_error(_request: Request, exc: Exception) -> Response:
        _log.error("unexpected error", exc_info=exc)
        return _error_response(
            ApiError(500, "internal error: see the server's log", kind="server_error")
        )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        state.worker.stop()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/props", props, methods=["GET"]),
        Route("/slots", slots, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/chat/completions", endpoint(openai_api.chat_completions), methods=["POST"]),
        Route("/chat/completions", endpoint(openai_api.chat_completions), methods=["POST"]),
        Route("/v1/completions", endpoint(openai_api.completions), methods=["POST"]),
        Route("/v1/messages", endpoint(anthropic_api.messages, anthropic), methods=["POST"]),
        Route(
            "/v1/messages/count_tokens",
            endpoint(anthropic_api.count_tokens, anthropic),
            methods=["POST"],
        ),
        Route("/v1/responses", endpoint(responses_api.responses), methods=["POST"]),
        Route("/completion", endpoint(llamacpp_api.completion), methods=["POST"]),
        Route("/completions", endpoint(llamacpp_api.completion), methods=["POST"]),
        Route("/infill", endpoint(llamacpp_api.infill), methods=["POST"]),
        Route("/tokenize", endpoint(tokens_api.tokenize), methods=["POST"]),
        Route("/detokenize", endpoint(tokens_api.detokenize), methods=["POST"]),
        Route("/apply-template", endpoint(tokens_api.apply_template), methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(LocalOnly, token=token, extra_hosts=tuple(extra_hosts)),
            *([Middleware(Recording, recorder=recorder)] if recorder else []),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
