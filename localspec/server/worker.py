"""Generations on a dedicated thread, fed by a bounded wait queue, editors first.

The `Runtime` is not thread-safe and llama_decode blocks for a whole target step, so every
model call runs on one worker thread while the event loop keeps serving health checks,
streams and new arrivals. A job's events travel back through an asyncio queue; setting the
job's `stop` flag (a client disconnect, an editor's time limit) ends its generation before the
next target step, with statistics, and the next job starts at once.

Scheduling. The worker advances one generation a step at a time, each in a slot of its
own (`localspec.server.slots`: the caches a client's next request reuses). An editor's request
(`Job.urgent`: `/infill` and FIM completions, a `t_max_prompt_ms` budget, a cache warm-up)
does not wait for a running answer: it starts at the running generation's next step
boundary, or within the llama.cpp call its prompt is in (`localspec.llama.pieces`: the call
is decoded again whole later; a prompt held back `--prompt-hold` seconds without finishing a
call first finishes that call), and runs to its end; the interrupted generation then goes on
where it stopped, its answer unchanged (the same calls, its own caches back). Other requests
run one after another in arrival order: without batched steps, taking turns would give each
client half the speed and cost a cache exchange per step. With one slot (`serve --parallel
1`) nothing is interrupted and jobs run in arrival order.

Editors first, within a bound: a request editors' requests kept from progress (a step, a
prompt call, its start) for `EDITOR_BOUND_S` gets one step or call before their next, however
many arrive (three clients flooding `/infill` kept a chat silent 9-22 s). Its gaps are at most
the bound, plus the editor's step under way (its prompt, for a new one) and one of its own.

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
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Protocol

from localspec.errors import LocalspecError
from localspec.llama.pieces import PROMPT_HOLD_S, PromptHold
from localspec.runtime import Runtime
from localspec.server.slots import Slot, Slots
from localspec.speculative.engine import Event, Finished, GenerationRequest, TextChunk
from localspec.speculative.events import Paused

_log = logging.getLogger(__name__)

# how long one slice of idle prompt processing may run before the queue is looked at again
IDLE_SLICE_S = 0.2
EDITOR_BOUND_S = 1.0
"""The longest a request waits without progress while editors' requests go first."""


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
    route: str = "infill"  # the endpoint's (an editor warms the cache its completions use)


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
    slot: int = 0  # the slot that holds it (`localspec.server.slots`)


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
    id_slot: int = -1  # the slot asked for (llama-server's `id_slot`; -1: any)
    events: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)
    stop: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.monotonic)  # when it arrived (queue wait)

    @property
    def route(self) -> str:
        """The route a slot remembers: a warm-up's is its endpoint's."""
        return self.caching.route if self.request is None else self.request.route

    @property
    def cache_reuse(self) -> int | None:
        """The chunk reuse the job asks for (None: the server's)."""
        asked = self.caching if self.request is None else self.request
        return asked.cache_reuse if asked.cache_prompt else 0

    @property
    def urgent(self) -> bool:
        """An editor's request: someone is waiting at the cursor, so it goes before a
        running answer (a completion that comes late is worthless)."""
        request = self.request
        return request is None or request.route == "infill" or request.max_prompt_s is not None

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


@dataclass(eq=False)
class _Task:
    """A started job: its slot and, for a generation, its events as it advances."""

    job: Job
    slot: Slot
    events: Generator[Event | Paused, None, None] | None
    interruptions: int = 0  # editors' requests that ran while it waited
    progressed: float = 0.0  # when it last moved on (the worker's clock): begun, a step, a call
    position: int = -1  # its prompt's tokens in the cache when last asked (-1: not yet)


class GenerationWorker:
    """Owns the runtime's thread; `submit` admits a job or refuses it when the queue is full."""

    def __init__(
        self,
        runtime: Runtime,
        max_waiting: int,
        parallel: int = 1,
        prompt_hold: float = PROMPT_HOLD_S,
        *,
        editor_bound: float = EDITOR_BOUND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`parallel` is the number of slots (`localspec.server.slots`); `prompt_hold` how long
        editors' requests may keep another request's prompt from moving on; `editor_bound`
        how long they may keep a request from any progress (on `clock`)."""
        self.runtime = runtime
        self.max_waiting = max_waiting
        self.prompt_hold = prompt_hold
        self.editor_bound = editor_bound
        self._clock = clock
        self._arrived: dict[Job, float] = {}  # waiting jobs' arrival, on `clock`
        self.slots = Slots(runtime, parallel)
        self._jobs: deque[Job] = deque()  # waiting, in arrival order
        self._urgent_waiting = 0  # of them, editors' (read without the lock between calls)
        self._wake = threading.Condition()
        self._stopping = False
        self._running: list[_Task] = []  # at most one urgent and one other
        self._cancelled = 0
        self._unfinished: tuple[Slot, list[int]] | None = None  # a cut prompt, for idle time
        self._idle_tokens = 0
        self.preempted = 0  # generations an editor's request interrupted, since the start
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
        return len(self._jobs)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    @property
    def processing(self) -> int:
        """Generations started and not finished (an editor's may run beside one it paused)."""
        return len(self._running)

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
        with self._wake:
            waiting = len(self._jobs)
            if waiting >= self.max_waiting and (self._running or waiting > 0):
                raise QueueFullError(
                    f"the server is busy: {len(self._running)} generation(s) running and "
                    f"{waiting} waiting (the limit, --queue); retry shortly"
                )
            self._jobs.append(job)
            self._arrived[job] = self._clock()
            self._urgent_waiting += job.urgent
            self._wake.notify()

    def cancel_all(self) -> None:
        """Ask the running jobs to stop before their next target step (a shutdown signal)."""
        for task in list(self._running):
            task.job.stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every waiting and running job and end the thread."""
        with self._wake:
            jobs, self._stopping = list(self._jobs), True
            self._jobs.clear()
            self._arrived.clear()
            self._urgent_waiting = 0
            self._wake.notify()
        for job in jobs:
            job.stop.set()
            job.deliver(_Failed(LocalspecError("the server is shutting down")))
        self.cancel_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        if self._warm_up is not None:
            try:
                self._warm_up()
            except Exception:
                # requests still work (auto mode retries the calibration); say why it failed
                _log.exception("warm-up failed")
        self._ready.set()
        while True:
            task = self._next_task()
            if task is None:
                return
            self._advance(task)

    def _next_task(self) -> _Task | None:
        """What advances next (None: stop): an urgent task, an urgent job (interrupting
        another), the running task, the next job. While nothing runs or waits, a prompt a
        budget cut short is processed on, a slice at a time."""
        while True:
            with self._wake:
                if self._stopping:  # the running ones end first, cancelled (`cancel_all`)
                    return self._running[0] if self._running else None
                task = self._pick()
                if task is None and self._unfinished is None:
                    self._wake.wait()
                    continue
            if task is not None:
                return task
            self._process_unfinished()

    def _pick(self) -> _Task | None:
        """`_next_task`'s choice, under the lock; a job it starts leaves the queue."""
        self._drop_cancelled()
        interrupting = len(self.slots) > 1
        starved = self._starved() if interrupting else None
        if starved is not None:
            return starved
        urgent = [task for task in self._running if task.job.urgent]
        if urgent:
            return urgent[0]
        waiting_urgent = next((job for job in self._jobs if job.urgent), None)
        if waiting_urgent is not None and interrupting:
            for task in self._running:
                task.interruptions += 1
                self.preempted += 1
            return self._begin(waiting_urgent)
        if self._running:
            return self._running[0]
        if self._jobs:
            return self._begin(self._jobs[0])
        return None

    def _starved(self) -> _Task | None:
        """The request editors' requests have kept from progress for `editor_bound` (the
        bound the module docstring states): the started one other than an editor's, else the
        first such waiting one while none is started. None while no editor's request runs
        or waits: then the order is arrival order anyway."""
        if not (self._urgent_waiting or any(task.job.urgent for task in self._running)):
            return None
        now = self._clock()
        other = next((task for task in self._running if not task.job.urgent), None)
        if other is not None:
            return other if self._due(other, now) else None
        job = next((job for job in self._jobs if not job.urgent), None)
        if job is None or now - self._arrived[job] < self.editor_bound:
            return None
        return self._begin(job)

    def _due(self, task: _Task, now: float | None = None) -> bool:
        """Whether `task` has gone `editor_bound` without progress."""
        return (self._clock() if now is None else now) - task.progressed >= self.editor_bound

    def _drop_cancelled(self) -> None:
        """Jobs whose client left while they waited get their answer now."""
        for job in [job for job in self._jobs if job.stop.is_set()]:
            self._jobs.remove(job)
            del self._arrived[job]
            self._urgent_waiting -= job.urgent
            job.deliver(_Failed(LocalspecError("cancelled before it started")))

    def _begin(self, job: Job) -> _Task | None:
        """Start `job` in a slot; while none is free (it cannot happen: two tasks at most
        run at once, and interrupting needs two slots) the running task goes on."""
        slot = self.slots.choose(job.prompt, job.route, job.id_slot, job.cache_reuse)
        if slot is None:
            return self._running[0] if self._running else None
        self._jobs.remove(job)
        # a job the bound begins has waited too long already: its first call goes at once
        task = _Task(job, slot, None, progressed=self._arrived.pop(job))
        self._urgent_waiting -= job.urgent
        if self._unfinished is not None and self._unfinished[0] is slot:
            self._unfinished = None  # this job's prompt is the one to have ready now
        if job.request is not None:
            pause = self._prompt_hold(task) if not job.urgent and len(self.slots) > 1 else None
            task.events = self.runtime.generate_pausable(
                job.request,
                job.stop.is_set,
                pause=pause,
                ngram=slot.ngram,
                queued_s=time.monotonic() - job.submitted,
                interruptions=lambda: task.interruptions,
                slot=slot.id,
            )
        self._running.append(task)
        return task

    def _urgent_waits(self) -> bool:
        """Whether an editor's request waits (asked between a prompt's calls, and within one)."""
        return self._urgent_waiting > 0

    def _prompt_hold(self, task: _Task) -> PromptHold:
        """When `task`'s prompt stops for editors: while one waits, unless it has gone
        `prompt_hold` seconds without finishing a call (`localspec.llama.pieces.PromptHold`)
        or `editor_bound` without progress (then one call finishes first)."""
        status = self.runtime.status

        def position() -> int:
            at = status.cached_tokens
            if task.position >= 0 and at != task.position:
                task.progressed = self._clock()
            task.position = at
            return at

        def urgent() -> bool:
            return self._urgent_waits() and not self._due(task)

        return PromptHold(urgent, position, self.prompt_hold)

    def _advance(self, task: _Task) -> None:
        """One event of `task` (one target step, or a slice of its prompt): the caching of
        a prompt runs whole."""
        job = task.job
        try:
            self.slots.activate(task.slot)
            if task.events is None:
                self._cache(task.slot, job)
                self._end(task)
                return
            event = next(task.events, None)
        except LocalspecError as exc:
            job.deliver(_Failed(exc))
            self._end(task)
            return
        except Exception:
            _log.exception("generation failed")
            job.deliver(_Failed(InternalError("internal error: see the server's log")))
            self._end(task)
            return
        if event is None or isinstance(event, Paused):
            if event is None:
                self._end(task)
            return
        job.deliver(_ruled(job, event))
        task.progressed = self._clock()  # after the rule, which may hold the thread (tests)
        if isinstance(event, Finished):
            if event.finish_reason == "cancelled":
                self._cancelled += 1
            if event.finish_reason == "prompt_time" and job.request is not None:
                self._unfinished = (task.slot, list(job.request.prompt))
            self._end(task)

    def _end(self, task: _Task) -> None:
        """The task is over: its generation closed (what auto learned is saved then), its
        slot free."""
        if task.events is not None:
            try:
                task.events.close()
            except Exception:
                _log.exception("closing a generation failed")
        with self._wake:
            if task in self._running:
                self._running.remove(task)
            self.slots.release(task.slot)

    def _process_unfinished(self) -> None:
        """One slice of the cut-short prompt, in its slot; it is dropped when done or when
        it fails."""
        if self._unfinished is None:
            return
        slot, prompt = self._unfinished
        status = self.runtime.status
        try:
            self.slots.activate(slot)
            before = status.cached_tokens
            self.runtime.cache_prompt(prompt, max_prompt_s=IDLE_SLICE_S)
        except Exception:
            _log.exception("processing a cut-short prompt while idle failed")
            self._unfinished = None
            return
        self._idle_tokens += max(0, status.cached_tokens - before)
        if status.cached_tokens >= len(prompt) - 1:
            self._unfinished = None

    def _cache(self, slot: Slot, job: Job) -> None:
        """Cache the job's prompt: its last token is left pending and counts as cached, as
        a generation leaves it, unless the budget stopped the work before it."""
        prompt, caching = job.prompt, job.caching
        prefilled = self.runtime.cache_prompt(
            prompt,
            cache_reuse=caching.cache_reuse,
            cache_prompt=caching.cache_prompt,
            max_prompt_s=caching.max_prompt_s,
        )
        status = self.runtime.status
        cut = status.cached_tokens < len(prompt) - 1
        unprocessed = len(prompt) - status.cached_tokens if cut else 0
        if unprocessed > 0:
            self._unfinished = (slot, prompt)
        cached = len(prompt) - unprocessed
        reused, shifted, restored = prefilled.reused, prefilled.shifted, prefilled.restored
        processed = max(0, status.cached_tokens - reused)
        job.deliver(Cached(reused, cached, shifted, unprocessed, restored, processed, slot.id))
