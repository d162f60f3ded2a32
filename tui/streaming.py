"""How a streaming answer travels from the generation's worker thread to the UI: in batches.

The engine yields an event per target step, about one per token. Shown one at a time, each
re-parsed the open Markdown block, scrolled, and rewrote the status bar, on the UI thread,
while llama.cpp wanted every core and the engine the GIL: the app decoded at ~0.6x of
`localspec complete`. Now the worker adds each event to a `Coalescer` and wakes the UI only
for the first event of a batch; the UI takes what has gathered when it is due, and applies a
run of text chunks as one Markdown write, one extension of the spans and one scroll.

A batch is due at once when it holds anything but text (`Started`, `Finished`, `Cancelled`,
`Failed`, `Refused`: the turn's state changes without delay) or the answer's first text (the
time to first token is not delayed), and otherwise a wait after the previous batch: at least
`interval_s`, longer when showing a batch costs the UI thread more than `UI_SHARE` of that
wait. A batch is cheap in the coalescer and dear in Textual: the Markdown grows, so the whole
screen is laid out again and the scrolled view redrawn, 3-10 ms of CPU on a 2-core machine,
more with a long saved-conversation list. Measured, not guessed: the UI thread's CPU time
between two batches sets the next wait, so a fast machine streams at ~12 batches a second
and a slow one keeps the app's share of the cores it shares with llama.cpp small.

Nothing is dropped, merged or reordered: the UI receives exactly the engine's events, in
order, each stamped with when the worker got it (the live figures' token times).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from localspec import Finished, TextChunk
from tui.generation import Cancelled, Failed, LiveStats, Refused, Started, TurnEvent
from tui.store import Span

FLUSH_S = 0.08  # at most ~12 batches a second: smooth to read
MAX_FLUSH_S = 0.5  # however dear a batch is, the answer still visibly streams
UI_SHARE = 0.03  # the most of the wall time that showing the batches may take on the UI thread
STATUS_S = 0.25  # the status bar's live figures: 4 refreshes a second are plenty to read

Control = Started | Refused | Finished | Cancelled | Failed  # the events that are not text


@dataclass(frozen=True)
class Stamped:
    """An engine event and the `clock()` time at which the worker received it."""

    event: TurnEvent
    at: float


@dataclass(frozen=True)
class TextBatch:
    """Consecutive text chunks of one batch: shown together, accounted one by one."""

    chunks: tuple[Stamped, ...]

    @property
    def text(self) -> str:
        return "".join(chunk.text for chunk in self.texts)

    @property
    def spans(self) -> list[Span]:
        """One span per chunk, as the answer stores them (an empty chunk keeps its span)."""
        return [(len(chunk.text), chunk.source, chunk.from_draft) for chunk in self.texts]

    @property
    def texts(self) -> Iterator[TextChunk]:
        for stamped in self.chunks:
            assert isinstance(stamped.event, TextChunk)
            yield stamped.event

    def count(self, stats: LiveStats) -> None:
        """Account each chunk in the live figures at the time the worker received it."""
        for chunk, stamped in zip(self.texts, self.chunks, strict=True):
            stats.on_chunk(chunk, stamped.at)


def grouped(batch: Sequence[Stamped]) -> Iterator[TextBatch | Control]:
    """`batch` in order, each run of text chunks as one `TextBatch`."""
    run: list[Stamped] = []
    for stamped in batch:
        if isinstance(stamped.event, TextChunk):
            run.append(stamped)
            continue
        if run:
            yield TextBatch(tuple(run))
            run = []
        yield stamped.event
    if run:
        yield TextBatch(tuple(run))


class Coalescer:
    """The events of one turn between its worker (`push`) and the UI (`due_in`, `take`).

    `interval_s` is the least time between two batches of text: 0 lets every wake take what
    has gathered; a huge one holds all text after the first until the turn's end (tests use
    both, so that no assertion depends on the machine's speed). `cpu_clock` is the UI
    thread's CPU time (`take` runs there); a constant one turns the measured wait off.
    """

    def __init__(
        self,
        interval_s: float = FLUSH_S,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.interval_s = interval_s
        self._clock, self._cpu_clock = clock, cpu_clock
        self._lock = threading.Lock()
        self._pending: list[Stamped] = []
        self._woken = False  # a wake for the pending events is on its way, or a timer is set
        self._urgent = False  # the pending events hold one that is not text
        self._text_taken = False
        self._taken_at = 0.0
        self._cpu_at: float | None = None  # the UI's CPU time at the last take of text
        self.batch_cost_s = 0.0  # the UI's CPU time per batch of text, smoothed
        self.batches = 0  # batches taken: what a test counts

    @property
    def wait_s(self) -> float:
        """The time between two batches of text now: the interval, or what keeps showing
        them within `UI_SHARE` of the UI thread's time."""
        return max(self.interval_s, min(MAX_FLUSH_S, self.batch_cost_s / UI_SHARE))

    def push(self, event: TurnEvent) -> bool:
        """Worker: add `event`; True when the UI must be woken for it (post it one message)."""
        urgent = not isinstance(event, TextChunk)
        with self._lock:
            self._pending.append(Stamped(event, self._clock()))
            wake = urgent or not self._woken
            self._woken = True
            self._urgent = self._urgent or urgent
            return wake

    def due_in(self) -> float:
        """UI: seconds until the pending events are due (0: take them now)."""
        with self._lock:
            if self._urgent or not self._text_taken:
                return 0.0
            return max(0.0, self._taken_at + self.wait_s - self._clock())

    def take(self) -> list[Stamped]:
        """UI: the pending events, in the order pushed; the next push wakes the UI again."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._woken = self._urgent = False
            if batch:
                self.batches += 1
                self._taken_at = self._clock()
                if any(isinstance(s.event, TextChunk) for s in batch):
                    self._text_taken = True
                    self._measure()
            return batch

    def _measure(self) -> None:
        """Account what the UI thread spent since the last batch of text: showing it and
        drawing the frames it caused (and anything else the app did meanwhile, so the wait
        errs on the long side)."""
        cpu = self._cpu_clock()
        if self._cpu_at is not None:
            spent = cpu - self._cpu_at
            first = self.batch_cost_s == 0.0
            self.batch_cost_s = spent if first else 0.7 * self.batch_cost_s + 0.3 * spent
        self._cpu_at = cpu


def due_batch(stream: Coalescer, timed: bool, later: Callable[[float], object]) -> list[Stamped]:
    """UI, on a wake: the events to apply now (perhaps none).

    Events not due yet are left for a later wake, which `later(seconds)` arranges; that timed
    wake takes them whatever the clock says (a timer may fire a little early). With an
    infinite interval no timer is set: the turn's last event takes them.
    """
    delay = stream.due_in()
    if delay > 0 and not timed:
        if math.isfinite(delay):
            later(delay)
        return []
    return stream.take()
