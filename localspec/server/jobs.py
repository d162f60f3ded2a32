"""Running a job for an HTTP request: admission, disconnect watching, statistics on the wire.

A client that goes away cancels its generation: streaming responses notice through
Starlette's disconnect listener (the stream is cancelled, `Job.stream` sets the stop flag);
non-streaming ones through a task that waits for the `http.disconnect` message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from localspec.errors import LocalspecError
from localspec.runtime import Runtime
from localspec.server.wire import api_error
from localspec.server.worker import Cached, GenerationWorker, Job
from localspec.speculative.engine import Event, Finished, GenerationRequest, SpecSettings
from localspec.speculative.stats import GenerationStats


@dataclass
class ServerState:
    """What every handler needs: the runtime (read-only outside the worker), the worker,
    the public model id and the server's default speculation settings."""

    runtime: Runtime
    worker: GenerationWorker
    model_id: str
    spec: SpecSettings
    max_tokens_default: int


def submit(state: ServerState, prompt: list[int], request: GenerationRequest | None) -> Job:
    job = Job(prompt, request, asyncio.get_running_loop())
    try:
        state.worker.submit(job)
    except LocalspecError as exc:
        raise api_error(exc) from exc
    return job


async def events(job: Job) -> AsyncGenerator[Event | Cached, None]:
    """The job's events with expected failures turned into `ApiError`s."""
    stream = job.stream()
    try:
        while True:
            try:
                event = await anext(stream)
            except StopAsyncIteration:
                return
            except LocalspecError as exc:
                raise api_error(exc) from exc
            yield event
    finally:
        await stream.aclose()


@contextlib.asynccontextmanager
async def cancel_on_disconnect(http: Request, job: Job) -> AsyncIterator[None]:
    """For non-streaming responses: stop `job` when the client disconnects meanwhile."""

    async def watch() -> None:
        while True:
            message = await http.receive()
            if message["type"] == "http.disconnect":
                job.stop.set()
                return

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama.cpp's `timings` object, with its speculative counters `draft_n`/`draft_n_accepted`."""
    prompt_n = stats.prompt_tokens - stats.cached_tokens
    prompt_ms = stats.prefill_s * 1000.0
    predicted_ms = stats.generation_s * 1000.0
    predicted_n = stats.generated_tokens
    return {
        "cache_n": stats.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / stats.prefill_s if stats.prefill_s > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": stats.tokens_per_second,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def localspec_stats(stats: GenerationStats, **extra: Any) -> dict[str, Any]:
    """localspec's own statistics: acceptance, mean acceptance length, the tuner's choices.

    `stop` says why generation ended in the engine's words: OpenAI's "length" covers both
    max_tokens ("length") and a full context ("context")."""
    record = stats.to_dict()
    record["stop"] = stats.finish_reason
    record.update(extra)
    return record


def finished_stats(event: Finished, **extra: Any) -> dict[str, Any]:
    return {
        "timings": timings(event.stats),
        "localspec": localspec_stats(event.stats, **extra),
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()
