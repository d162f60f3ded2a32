"""One generation at a time on a dedicated thread, fed by a bounded wait queue.

The `Runtime` is not thread-safe and llama_decode blocks for a whole target step, so every
model call runs on one worker thread while the event loop keeps serving health checks,
streams and new arrivals. A job's events travel back through an asyncio queue; setting the
job's `stop` flag (a client disconnect, an editor's time limit) ends its generation before the
next target step, with statistics, and the next job starts at once.

A prompt that a request's time budget (`t_max_prompt_ms`) cut short is processed on while no
job waits, a slice of `IDLE_SLICE_S` at a time, so the budget bounds how long the editor waits
for an answer, not how much of its context gets ready: llama.vim's ring warm-ups send a 1 ms
budget and rely on the context being processed before the next completion. A job that arrives
waits for the running slice only, and the new job's prompt replaces the unfinished one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from localspec.errors import LocalspecError
from localspec.runtime import Runtime
from localspec.speculative.engine import Event, Finished, GenerationRequest, TextChunk

_log = logging.getLogger(__name__)

# how long one slice of idle prompt processing may run before the queue is looked at again
IDLE_SLICE_S = 0.2


class QueueFullError(LocalspecError):
    """More requests are waiting than the server accepts; the client should retry later."""


class InternalError(LocalspecError):
    """A bug: the client gets a generic message, the log gets the traceback."""


@dataclass(frozen=True)
class Caching:
    """How a prompt-caching job reuses the cache (`Runtime.cache_prompt`'s options)."""

    cache_reuse: int | None = None
    cache_prompt: bool = True
    max_prompt_s: float | None = None


@dataclass(frozen=True)
class Cached:
    """The result of a prompt-caching job (no generation): tokens reused (`shifted` of them
    by shifting) and now cached; `unprocessed` > 0 when the time budget cut it short."""

    reused: int
    cached: int
    shifted: int = 0
    unprocessed: int = 0
    restored: int = 0  # of `reused`, from a state the prompt cache restored
    # prompt tokens decoded by this job: the pending last one is not (the next request
    # decodes it, and counts it), so a warm-up and its completion never both count it
    processed: int = 0


class StepRule(Protocol):
    """A surface's own stop rule over the generated text (llama.cpp's editor rules).

    The worker feeds it each step's text with the step's `generated_s` and sends on what it
    returns; once it is `done`, the generation ends before another target step. Run on the
    event loop instead, a rule would see a chunk only after the worker had started the next
    step: every answer it ends would cost one more target step (~50-100 ms on a CPU)."""

    @property
    def done(self) -> bool: ...

    def feed(self, piece: str, generated_s: float) -> str: ...


@dataclass(frozen=True)
class _Failed:
    error: LocalspecError


JobEvent = Event | Cached | _Failed


@dataclass(eq=False)
class Job:
    """A generation (or, with `request` None, caching `prompt` as `caching` says) and its way
    back to the loop."""

    prompt: list[int]
    request: GenerationRequest | None
    loop: asyncio.AbstractEventLoop
    caching: Caching = field(default_factory=Caching)
    rule: StepRule | None = None
    events: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)
    stop: threading.Event = field(default_factory=threading.Event)

    def deliver(self, event: JobEvent) -> None:
        """Hand an event to the event loop (from the worker thread)."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: the server is shutting down
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    async def stream(self) -> AsyncGenerator[Event | Cached, None]:
        """The job's events until it ends; leaving early (a disconnect) stops the job."""
        try:
            while True:
                event = await self.events.get()
                if isinstance(event, _Failed):
                    raise event.error
                yield event
                if isinstance(event, Finished | Cached):
                    return
        finally:
            self.stop.set()


def _ruled(job: Job, event: Event) -> Event:
    """`event` as the job's rule sends it on; a rule that fires stops the job, which the
    generation asks before its next step."""
    if job.rule is None or not isinstance(event, TextChunk):
        return event
    passed = replace(event, text=job.rule.feed(event.text, event.generated_s))
    if job.rule.done:
        job.stop.set()
    return passed


class GenerationWorker:
    """Owns the runtime's thread; `submit` admits a job or refuses it when the queue is full."""

    def __init__(self, runtime: Runtime, max_waiting: int) -> None:
        self.runtime = runtime
        self.max_waiting = max_waiting
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._busy = False
        self._cancelled = 0
        self._current: Job | None = None
        self._unfinished: list[int] | None = None  # a prompt cut short, to process when idle
        self._idle_tokens = 0
        self._warm_up: Callable[[], object] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="localspec-generation", daemon=True)

    def start(self, warm_up: Callable[[], object] | None = None) -> None:
        """Start the thread; `warm_up` (a calibration, say) runs on it before the first job."""
        self._warm_up = warm_up
        self._thread.start()

    @property
    def ready(self) -> bool:
        """Whether the warm-up is done (requests sent earlier wait for it)."""
        return self._ready.is_set()

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def cancelled(self) -> int:
        """Generations stopped before their end (a client gone, a shutdown) since the start."""
        return self._cancelled

    @property
    def idle_prompt_tokens(self) -> int:
        """Prompt tokens processed while no job waited (after a time budget cut a prompt):
        work no request's `timings` counts, since the start."""
        return self._idle_tokens

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._waiting >= self.max_waiting and (self._busy or self._waiting > 0):
                raise QueueFullError(
                    f"the server is busy: one generation running and {self._waiting} waiting "
                    f"(the limit, --queue); retry shortly"
                )
            self._waiting += 1
        self._queue.put(job)

    def cancel_all(self) -> None:
        """Ask the running job to stop before its next target step (a shutdown signal)."""
        current = self._current
        if current is not None:
            current.stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every waiting and running job and end the thread."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.stop.set()
                job.deliver(_Failed(LocalspecError("the server is shutting down")))
        self._queue.put(None)
        self.cancel_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        if self._warm_up is not None:
            try:
                self._warm_up()
            except Exception:
                # requests still work (auto mode retries the calibration); say why it failed
                _log.exception("warm-up failed")
        self._ready.set()
        while True:
            job = self._next_job()
            if job is None:
                return
            with self._lock:
                self._waiting -= 1
                self._busy = True
                self._current = job
            try:
                self._execute(job)
            finally:
                with self._lock:
                    self._busy = False
                    self._current = None

    def _next_job(self) -> Job | None:
        """The next job (None: stop). While none waits, an unfinished prompt is processed on."""
        while self._unfinished is not None:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                self._process_unfinished(self._unfinished)
        return self._queue.get()

    def _process_unfinished(self, prompt: list[int]) -> None:
        """One slice of the cut-short prompt; it is dropped when done or when it fails."""
        context = self.runtime.models.target_context
        before = context.n_past
        try:
            self.runtime.cache_prompt(prompt, max_prompt_s=IDLE_SLICE_S)
        except Exception:
            _log.exception("processing a cut-short prompt while idle failed")
            self._unfinished = None
            return
        self._idle_tokens += max(0, context.n_past - before)
        if context.n_past >= len(prompt) - 1:
            self._unfinished = None

    def _execute(self, job: Job) -> None:
        self._unfinished = None  # this job's prompt is the one to have ready now
        if job.stop.is_set():  # the client left while waiting
            job.deliver(_Failed(LocalspecError("cancelled before it started")))
            return
        try:
            if job.request is None:
                cached = self._cache(job.prompt, job.caching)
                if cached.unprocessed > 0:
                    self._unfinished = job.prompt
                job.deliver(cached)
                return
            for event in self.runtime.generate(job.request, job.stop.is_set):
                job.deliver(_ruled(job, event))
                if isinstance(event, Finished) and event.finish_reason == "cancelled":
                    self._cancelled += 1
                if isinstance(event, Finished) and event.finish_reason == "prompt_time":
                    self._unfinished = list(job.request.prompt)
        except LocalspecError as exc:
            job.deliver(_Failed(exc))
        except Exception:
            _log.exception("generation failed")
            job.deliver(_Failed(InternalError("internal error: see the server's log")))

    def _cache(self, prompt: list[int], caching: Caching) -> Cached:
        """Cache `prompt`: its last token is left pending and counts as cached, as a
        generation leaves it, unless the budget stopped the work before it."""
        reused = self.runtime.cache_prompt(
            prompt,
            cache_reuse=caching.cache_reuse,
            cache_prompt=caching.cache_prompt,
            max_prompt_s=caching.max_prompt_s,
        )
        context = self.runtime.models.target_context
        cut = context.n_past < len(prompt) - 1
        unprocessed = len(prompt) - context.n_past if cut else 0
        cached = len(prompt) - unprocessed
        restored = context.last_restored
        processed = max(0, context.n_past - reused)
        return Cached(reused, cached, context.last_shifted, unprocessed, restored, processed)
