"""Running a job for an HTTP request: admission, the response, statistics on the wire.

Both APIs answer a generation the same way (`respond`): submit the job, then either wait for
its end while watching for a disconnect, or wait for its first event (so an error before any
output gets a real status code) and stream the rest, an error after the headers traveling as
one more event. Each API only says how its events look (`Wire`).

A client that goes away cancels its generation: streaming responses notice through
Starlette's disconnect listener (the stream is cancelled, `Job.stream` sets the stop flag);
non-streaming ones through a task that waits for the `http.disconnect` message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localspec.constraints import Constraint
from localspec.errors import LocalspecError
from localspec.server.admission import BodyGate, read_fields, release
from localspec.server.body import BODY_TIMEOUT_S
from localspec.server.hosted_tools import LeftOutLog
from localspec.server.limits import checked_stops
from localspec.server.metrics import ServerMetrics
from localspec.server.response_store import ResponseStore
from localspec.server.served import served_line
from localspec.server.served_runtime import ServedRuntime
from localspec.server.wire import (
    ApiError,
    Fields,
    RequestDefaults,
    api_error,
    context_exceeded,
    refuse_unhonoured,
    request_from,
    sampling_from,
    spec_from,
)
from localspec.server.worker import Cached, Caching, GenerationWorker, Job, StepRule
from localspec.speculative.engine import Event, Finished, GenerationRequest, TextChunk
from localspec.speculative.stats import GenerationStats
from localspec.speculative.textstream import StopLimits


@dataclass
class ServerState:
    """What every handler needs: the runtime (read-only outside the worker), the worker,
    the public model id, the defaults for fields a request leaves out, the body limit and the
    limits on its stop strings; the model names `/v1/models` lists beside the id (`aliases`)
    and whether a request naming another model is refused (`strict_model_names`); the
    Responses API's conversations (`responses`); where the line each answered request gets
    goes (`announce`: `serve`'s stderr); whether clients' volatile lines stay in prompts
    (`keep_client_headers`, `localspec.server.client_lines`) and the hosted tools left out
    of them (`left_out`). Bodies become prompts in turns at `gate`
    (`localspec.server.admission`)."""

    runtime: ServedRuntime
    worker: GenerationWorker
    model_id: str
    defaults: RequestDefaults
    max_body: int
    stop_limits: StopLimits = field(default_factory=StopLimits)
    aliases: tuple[str, ...] = ()
    strict_model_names: bool = False
    responses: ResponseStore = field(default_factory=ResponseStore)
    announce: Callable[[str], None] = lambda _line: None  # a line per answered request
    metrics: ServerMetrics | None = None  # `serve --metrics`
    keep_client_headers: bool = False  # `serve --keep-client-headers` (`client_lines`)
    left_out: LeftOutLog = field(default_factory=LeftOutLog)  # hosted tools, logged once
    body_timeout_s: float | None = BODY_TIMEOUT_S  # `serve --body-timeout` (None: no limit)
    gate: BodyGate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = BodyGate(self.max_body, self.body_timeout_s)

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names that always mean the served model: its id, aliases and file name."""
        target = self.runtime.settings.target
        return (self.model_id, *self.aliases, target.name, target.stem, "default")


async def read_request(http: Request, state: ServerState) -> Fields:
    """The request's body as fields, read in its turn at the state's gate, which it keeps
    until its job is queued or it is answered."""
    return Fields(await read_fields(http, state.gate, state.max_body))


def check_prompt(state: ServerState, prompt: list[int]) -> None:
    """Refuse up front what the engine would refuse, so the client gets a proper status."""
    if not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    n_ctx = state.runtime.n_ctx
    if len(prompt) >= n_ctx:
        raise context_exceeded(len(prompt), n_ctx)
    vocabulary_size = state.runtime.models.target_model.n_vocab  # after the length: cheaper
    if any(not 0 <= token < vocabulary_size for token in prompt):
        raise ApiError(400, f"token ids must be in [0, {vocabulary_size})", param="prompt")


def generation_request(
    state: ServerState,
    fields: Fields,
    prompt: list[int],
    route: str,
    max_tokens: int,
    *,
    constraint: Constraint | None = None,
    max_prompt_s: float | None = None,
    stop: tuple[str, ...] | None = None,
) -> GenerationRequest:
    """The request every API builds from the fields they share; absent ones take the
    server's defaults. `max_tokens` is the API's own reading of its length field;
    `constraint` the output's, already checked (`localspec.server.constraints`);
    `max_prompt_s` the llama.cpp endpoints' `t_max_prompt_ms`; `stop` the API's own stop
    strings where it does not call them `stop` (Anthropic's `stop_sequences`)."""
    check_prompt(state, prompt)
    refuse_unhonoured(fields)
    defaults = state.defaults
    cache_reuse, cache_prompt = reuse_fields(fields)
    given = request_from(fields, defaults)
    return GenerationRequest(
        prompt=prompt,
        max_tokens=max_tokens,
        sampling=sampling_from(fields, defaults.sampling),
        spec=spec_from(fields, defaults.spec),
        stop=checked_stops(_stops(fields, given["stop"], stop), state.stop_limits),
        ignore_eos=given["ignore_eos"],
        route=route,
        constraint=constraint,
        cache_reuse=cache_reuse,
        cache_prompt=cache_prompt,
        max_prompt_s=max_prompt_s,
    )


def _stops(fields: Fields, given: tuple[str, ...], own: tuple[str, ...] | None) -> tuple[str, ...]:
    """The stop strings: the request's `stop` (`given`: the server's default where it is
    absent), and where the API's own field was sent (`own`: Anthropic's `stop_sequences`)
    that one's and the request's `stop`'s together. An empty list sent is no stop strings,
    as on every endpoint."""
    if own is None:
        return given
    return tuple(dict.fromkeys((*own, *(given if fields.present("stop") else ()))))


def reuse_fields(fields: Fields) -> tuple[int | None, bool]:
    """llama-server's `n_cache_reuse` (the shortest cached chunk to shift into place; absent:
    `localspec serve --cache-reuse`) and `cache_prompt` (false: process the prompt afresh)."""
    present = fields.present("n_cache_reuse")
    cache_reuse = fields.integer("n_cache_reuse", 0) if present else None
    return cache_reuse, fields.boolean("cache_prompt", True)


def submit(
    state: ServerState,
    prompt: list[int],
    request: GenerationRequest | None,
    caching: Caching | None = None,
    *,
    rule: StepRule | None = None,
    id_slot: int = -1,
) -> Job:
    """Queue a generation, or with `request` None the caching of `prompt`; `rule` is the
    endpoint's stop rule, which the worker applies to each step (`StepRule`); `id_slot` the
    slot the client asked for."""
    loop = asyncio.get_running_loop()
    job = Job(prompt, request, loop, caching or Caching(), rule, id_slot)
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


Payload = dict[str, Any] | str
"""One server-sent event's data: a JSON object, or a marker such as OpenAI's `[DONE]`."""

KEEPALIVE_S = 10.0
"""How long a stream waits for its first event before sending its headers and keep-alive
bytes: a long prompt takes minutes on a CPU, and clients give up on a server that sends
nothing (Node's fetch, which Claude Code, Codex CLI and opencode use, waits 300 s for
headers). After the headers an error can only travel as an event."""


@dataclass(frozen=True)
class Wire:
    """How one endpoint writes a generation; `respond` does the rest.

    `rule` is the endpoint's own stop rule, run on the worker as each step ends
    (`StepRule`): the chunks arrive with their text cut where it fired, and the step that
    fires it is the last. `piece` is the events for a chunk's text (one, or a list: none,
    or a block's opening and its first delta); `answer` the whole non-streamed body;
    `ending` the events that close a stream; `opening` the events before the first piece.
    `every_step`: a step whose text is held back (a stop string or a character not yet
    complete) still gets its event, for the figures it carries. `named`: each event also
    carries its object's `type` as the SSE event name (Anthropic's and the Responses
    API's streams; their SDKs dispatch on it). `failure` is an error's event once the
    headers are sent; `keepalive` what is sent while the first event is awaited (None: an
    SSE comment, which every client's parser skips)."""

    answer: Callable[[Finished], dict[str, Any]]
    piece: Callable[[TextChunk, str], Payload | list[Payload]]
    ending: Callable[[Finished], list[Payload]]
    opening: tuple[Payload, ...] = ()
    every_step: bool = False
    rule: StepRule | None = None
    named: bool = False
    failure: Callable[[ApiError], Payload] = ApiError.body  # OpenAI's shape
    keepalive: Payload | None = None
    id_slot: int = -1  # the slot the client asked for (llama-server's `id_slot`; -1: any)

    def write(self, payload: Payload) -> bytes:
        name = payload.get("type") if self.named and isinstance(payload, dict) else None
        return sse(payload, event=name if isinstance(name, str) else None)

    def pieces(self, event: TextChunk) -> list[Payload]:
        written = self.piece(event, event.text)
        return written if isinstance(written, list) else [written]


async def whole_answer(
    http: Request, state: ServerState, request: GenerationRequest, wire: Wire
) -> dict[str, Any]:
    """Run `request` to its end and return the body a non-streamed response sends."""
    release(http)  # the queue bounds it from here
    job = submit(state, list(request.prompt), request, rule=wire.rule, id_slot=wire.id_slot)
    async with cancel_on_disconnect(http, job):
        async for event in events(job):
            if isinstance(event, Finished):
                state.announce(served_line(http.url.path, event))
                return wire.answer(event)
    raise ApiError(500, "the generation ended without a result", kind="server_error")


async def respond(
    http: Request, state: ServerState, request: GenerationRequest, wire: Wire, *, stream: bool
) -> Response:
    """Run `request` and answer it, whole or as server-sent events.

    A stream's headers wait for its first event, so that an error before any output (a
    queue limit, a refused prompt) gets its own status code; a prompt still being processed
    after `KEEPALIVE_S` gets the headers anyway, then keep-alive bytes until it is done."""
    release(http)  # the queue bounds it from here
    if not stream:
        return JSONResponse(await whole_answer(http, state, request, wire))
    job = submit(state, list(request.prompt), request, rule=wire.rule, id_slot=wire.id_slot)
    stream_events = events(job)
    first = asyncio.ensure_future(anext(stream_events))
    try:
        await asyncio.wait({first}, timeout=KEEPALIVE_S)
        if first.done():
            first.result()  # an error before any output: raised here, with its status
    except BaseException:
        await _close(first, stream_events)
        raise
    path = http.url.path
    body = stream_body(
        wire, first, stream_events, on_end=lambda event: state.announce(served_line(path, event))
    )
    return StreamingResponse(body, media_type="text/event-stream")


async def _close(first: asyncio.Future[Event | Cached], stream_events: AsyncGenerator[Any]) -> None:
    """Stop waiting for the first event (the generator cannot be closed while it runs), then
    close the events, which stops the job."""
    if not first.done():
        first.cancel()
        with contextlib.suppress(BaseException):
            await first
    await stream_events.aclose()


async def stream_body(
    wire: Wire,
    first: asyncio.Future[Event | Cached],
    stream_events: AsyncGenerator[Event | Cached],
    keepalive_s: float = KEEPALIVE_S,
    on_end: Callable[[Finished], None] = lambda _event: None,
) -> AsyncIterator[bytes]:
    """The stream: the opening events, keep-alives while `first` is awaited (one each
    `keepalive_s`), then every event until the job's end (which `on_end` hears of)."""
    try:
        for payload in wire.opening:
            yield wire.write(payload)
        while not first.done():
            await asyncio.wait({first}, timeout=keepalive_s)
            if not first.done():
                yield b": keep-alive\n\n" if wire.keepalive is None else wire.write(wire.keepalive)
        event = first.result()
        while True:
            if isinstance(event, TextChunk):
                if event.text or wire.every_step:
                    for payload in wire.pieces(event):
                        yield wire.write(payload)
            elif isinstance(event, Finished):
                on_end(event)
                for payload in wire.ending(event):
                    yield wire.write(payload)
                return
            event = await anext(stream_events)
    except ApiError as exc:  # the headers are sent: the error travels as an event
        yield wire.write(wire.failure(exc))
    finally:
        await _close(first, stream_events)


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama.cpp's `timings` object, with its speculative counters `draft_n`/`draft_n_accepted`;
    `prompt_n` counts the prompt tokens processed (not those a time budget left), and
    `cache_shifted` those of `cache_n` that were shifted into place, `cache_restored` those
    from a saved state the prompt cache restored (localspec's)."""
    prompt_n = stats.prompt_tokens - stats.cached_tokens - stats.prompt_unprocessed
    prompt_ms = stats.prefill_s * 1000.0
    predicted_ms = stats.generation_s * 1000.0
    predicted_n = stats.generated_tokens
    return {
        "cache_n": stats.cached_tokens,
        "cache_shifted": stats.shifted_tokens,
        "cache_restored": stats.restored_tokens,
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


def sse(payload: Payload, *, event: str | None = None) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    named = f"event: {event}\n" if event else ""
    return f"{named}data: {data}\n\n".encode()
