"""Coalesced streaming: batches at a bounded rate, in order, and exactly the engine's answer.

The coalescer is tested on a fake clock; the app on the tiny models with flush intervals of 0
(every wake takes what has gathered), the default, and infinity (all text after the first
batch waits for the end), so that no assertion depends on how fast this machine is.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Markdown, Static

from localspec import (
    Finished,
    GenerationRequest,
    GenerationStats,
    Message,
    SpecMode,
    TextChunk,
)
from tests.tui.helpers import SIZE, answered, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.generation import Cancelled, LiveStats, Started, TurnEvent
from tui.screens.chat import ChatScreen
from tui.settings import ChatSettings
from tui.store import ChatStore, Span
from tui.streaming import (
    FLUSH_S,
    MAX_FLUSH_S,
    UI_SHARE,
    Coalescer,
    TextBatch,
    due_batch,
    grouped,
)
from tui.widgets.message import MessageView, highlighted

QUESTION = "Write a function that adds two numbers"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _chunk(text: str, from_draft: int = 0) -> TextChunk:
    return TextChunk(text, [1] * (from_draft + 1), "draft", from_draft, from_draft)


def test_batches_wait_for_the_interval_and_keep_the_order() -> None:
    clock = FakeClock()
    stream = Coalescer(0.08, clock, cpu_clock=lambda: 0.0)
    started = Started(10, 512)
    assert stream.push(started)  # not text: the UI is woken and may take it at once
    assert stream.due_in() == 0.0
    assert [s.event for s in stream.take()] == [started]
    clock.now += 0.001
    first = _chunk("def")
    assert stream.push(first)
    assert stream.due_in() == 0.0  # the answer's first text goes at once (TTFT)
    assert stream.take()[0].at == pytest.approx(100.001)
    clock.now += 0.01
    second, third = _chunk(" add", 1), _chunk("(a")
    assert stream.push(second)  # the first event of a batch wakes the UI...
    assert not stream.push(third)  # ...the others wait with it
    assert stream.due_in() == pytest.approx(0.07)  # 80 ms after the previous batch
    clock.now += 0.07
    assert stream.due_in() == 0.0
    assert [s.event for s in stream.take()] == [second, third]
    fourth, finished = _chunk(", b)"), Cancelled()
    clock.now += 0.001
    assert stream.push(fourth)
    assert stream.due_in() > 0
    assert stream.push(finished)  # the turn's end wakes the UI and takes the text before it
    assert stream.due_in() == 0.0
    assert [s.event for s in stream.take()] == [fourth, finished]
    assert stream.take() == [] and stream.batches == 4


def test_runs_of_text_are_grouped_and_counted_at_their_own_times() -> None:
    clock = FakeClock()
    stream = Coalescer(math.inf, clock)
    events: list[TurnEvent] = [
        Started(3, 64),
        _chunk("a", 0),
        _chunk("", 0),
        _chunk("bc", 1),
        Cancelled(),
    ]
    for event in events:
        clock.now += 1.0
        stream.push(event)
    parts = list(grouped(stream.take()))
    assert [type(p) for p in parts] == [Started, TextBatch, Cancelled]
    text = parts[1]
    assert isinstance(text, TextBatch)
    assert text.text == "abc"
    assert text.spans == [(1, "draft", 0), (0, "draft", 0), (2, "draft", 1)]
    stats = LiveStats(started=100.0)
    text.count(stats)
    # the times the worker received the chunks, not the time the UI took them
    assert (stats.first_token, stats.last_token, stats.tokens) == (102.0, 104.0, 4)


def test_a_dear_batch_lengthens_the_wait_within_bounds() -> None:
    clock, cpu = FakeClock(), FakeClock()
    stream = Coalescer(0.08, clock, cpu_clock=cpu)
    stream.push(_chunk("x"))
    stream.take()
    assert stream.wait_s == 0.08  # nothing measured yet
    for _ in range(30):  # each batch costs the UI thread 6 ms of CPU
        cpu.now += 0.006
        clock.now += stream.wait_s
        stream.push(_chunk("x"))
        stream.take()
    assert stream.batch_cost_s == pytest.approx(0.006)
    assert stream.wait_s == pytest.approx(0.006 / UI_SHARE)  # 0.2 s: 3% of the UI's time
    assert stream.due_in() == pytest.approx(stream.wait_s)
    cpu.now += 1.0  # one very dear batch: the wait grows, but the answer still streams
    stream.push(_chunk("x"))
    stream.take()
    assert stream.wait_s == MAX_FLUSH_S
    cheap = Coalescer(0.08, clock, cpu_clock=cpu)
    for _ in range(3):
        cpu.now += 0.0001
        cheap.push(_chunk("x"))
        cheap.take()
    assert cheap.wait_s == 0.08  # a cheap batch never goes below the interval


def test_a_wake_before_the_batch_is_due_asks_for_a_timer_once() -> None:
    clock = FakeClock()
    stream = Coalescer(0.5, clock, cpu_clock=lambda: 0.0)
    stream.push(_chunk("x"))
    stream.take()
    later = _chunk("y")
    stream.push(later)
    timers: list[float] = []
    assert due_batch(stream, timed=False, later=timers.append) == []
    assert timers == [0.5]
    # the timer's wake takes the batch even if it fires a little early
    assert [s.event for s in due_batch(stream, timed=True, later=timers.append)] == [later]
    never = Coalescer(math.inf, clock)
    never.push(_chunk("x"))
    never.take()
    never.push(_chunk("y"))
    assert due_batch(never, timed=False, later=timers.append) == []
    assert timers == [0.5]  # no timer for a batch that only the turn's end takes


def _engine_answer(
    screen: ChatScreen, settings: ChatSettings
) -> tuple[str, list[Span], GenerationStats]:
    """The same question through `Runtime.generate` directly, on the app's runtime."""
    runtime = screen.host.runtime
    assert runtime is not None
    request = GenerationRequest(
        prompt=runtime.prompts.chat_prompt([Message("user", QUESTION)]),
        max_tokens=settings.max_tokens,
        sampling=settings.sampling(screen.launch.sampling),
        spec=settings.spec(screen.launch.spec),
        route="chat",
    )
    spans: list[Span] = []
    with screen.host.lock:
        for event in runtime.generate(request):
            if isinstance(event, TextChunk):
                spans.append((len(event.text), event.source, event.from_draft))
            else:
                assert isinstance(event, Finished)
                return event.text, spans, event.stats
    raise AssertionError("the engine did not finish")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "flush_s"),
    [
        (SpecMode.OFF, 0.0),
        (SpecMode.OFF, math.inf),
        (SpecMode.DRAFT, 0.0),
        (SpecMode.DRAFT, FLUSH_S),
        (SpecMode.DRAFT, math.inf),
    ],
)
async def test_the_streamed_answer_is_exactly_the_engines(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path, mode: SpecMode, flush_s: float
) -> None:
    started = launch(tiny_target, tiny_draft_noisy, mode=mode, max_tokens=40)
    # no n-gram session cache: the engine's own run must not draft from the app's answer
    started = replace(started, runtime=replace(started.runtime, ngram_cache=False))
    app = ChatApp(started, store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        screen.flush_s = flush_s
        await pilot.press("f4")  # the highlighted twin is shown, so it grows while streaming
        await send(pilot, QUESTION)
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        text, spans, stats = _engine_answer(screen, screen.settings)
        assert answer.status == "complete"
        assert answer.content == text and answer.spans == spans
        assert len(spans) > 3  # streamed in many target steps
        if mode is SpecMode.DRAFT:
            assert any(from_draft for _, _, from_draft in answer.spans)
        assert answer.query_one(Markdown).source == text
        final = screen.stats.final if screen.stats else None
        assert final is not None
        figures = ("generated_tokens", "target_steps", "drafted", "accepted")
        assert [getattr(final, f) for f in figures] == [getattr(stats, f) for f in figures]
        stored = app.store.messages(screen.conversation_id or 0)[-1]
        assert (stored.content, stored.spans) == (text, spans)


@pytest.mark.anyio
async def test_a_long_interval_bounds_the_ui_flushes(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target, max_tokens=48), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        screen.flush_s = screen.status_s = math.inf
        # the turn waits for the runtime's lock, so its stream can be taken before it runs
        with screen.host.lock:
            await send(pilot, "count to fifty")
            await wait_until(pilot, lambda: screen.turn is not None, "the turn to start")
            assert screen.turn is not None
            stream = screen.turn.stream
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        assert answer.status == "complete" and len(answer.spans) >= 10
        # Started, the first text, and the rest with the end: never one flush per step
        assert 1 <= stream.batches <= 3 < len(answer.spans)
        assert answer.query_one(Markdown).source == answer.content
        assert screen.stats is not None and screen.stats.final is not None
        assert screen.stats.final.generated_tokens == screen.stats.tokens  # all were counted


class _Answer(App[None]):
    CSS = ".drafts { display: none; } .shown .drafts { display: block; }"

    def compose(self) -> ComposeResult:
        yield MessageView("assistant", status="streaming")


@pytest.mark.anyio
async def test_draft_highlighting_grows_in_place_and_only_while_shown() -> None:
    app = _Answer()
    async with app.run_test() as pilot:
        view = app.query_one(MessageView)
        drafts = view.query_one(".drafts", Static)
        view.add_class("shown")
        await pilot.pause()
        await view.append("def add", [(3, "draft", 0), (4, "draft", 1)])
        shown = drafts.content
        assert isinstance(shown, Text)
        await view.append("(a, b):", [(7, "ngram", 1)])
        assert drafts.content is shown  # the same Text, extended, not rebuilt
        assert shown == highlighted(view.content, view.spans)
        view.remove_class("shown")
        await pilot.pause()
        await view.append("\n    return a + b", [(17, "target", 0)])
        assert drafts.content is shown and shown.plain == "def add(a, b):"  # left alone
        view.refresh_drafts()  # what showing them again (F4) does
        assert drafts.content == highlighted(view.content, view.spans)
        await view.finish("complete")
        assert drafts.content == highlighted(view.content, view.spans)
