"""Errors the app did not expect, injected with real objects that raise: the app keeps running,
says so in one line, logs the trace and keeps the conversation."""

from __future__ import annotations

import logging
import math
import sqlite3
import stat
import threading
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from localspec import Event, Finished, GenerationRequest, Runtime, RuntimeSettings, TextChunk
from tests.tiny_models import CHAT_TEMPLATE, TinySpec, write_tiny_model
from tests.tui.helpers import SIZE, answered, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.screens.turns import CHECKPOINT_S
from tui.store import ChatStore, Status
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput

pytestmark = pytest.mark.anyio
BOOM = "boom: the engine broke"


class Faulty(Runtime):
    """The real tiny runtime; with `fail_after` set, its next generation raises a RuntimeError
    once that many chunks are out (later generations are whole again)."""

    fail_after: int | None = None

    def generate(
        self, request: GenerationRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        after, self.fail_after = self.fail_after, None
        events = super().generate(request, should_stop)
        return events if after is None else _failing(events, after)


def _failing(events: Generator[Event, None, None], after: int) -> Generator[Event, None, None]:
    with closing(events):
        chunks = 0
        for event in events:
            if isinstance(event, TextChunk) and event.tokens:
                if chunks == after:
                    raise RuntimeError(BOOM)
                chunks += 1
            yield event


class Held(Runtime):
    """The real tiny runtime. With `hold` given, its next generation's second step is already
    running when the UI could stop the turn, and its chunk is kept back until `hold` is set:
    the stopped turn's late events (that chunk, then its end) then come after the next turn
    has started. `answers`: how each generation ended, and its text."""

    hold: threading.Event | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[tuple[str, str]] = []

    def generate(
        self, request: GenerationRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        hold, self.hold = self.hold, None
        if hold is None:
            return _recorded(super().generate(request, should_stop), self.answers)
        checks = 0

        def stop() -> bool:
            nonlocal checks
            checks += 1
            # the check before the second step: that step started before the turn was stopped
            return checks != 2 and should_stop is not None and should_stop()

        return _recorded(_holding(super().generate(request, stop), hold), self.answers)


def _holding(events: Generator[Event, None, None], hold: threading.Event) -> Generator[Event]:
    with closing(events):
        chunks = 0
        for event in events:
            if isinstance(event, TextChunk) and event.tokens:
                chunks += 1
                if chunks == 2:
                    hold.wait(60)  # a hang guard: the test sets it
            yield event


def _recorded(
    events: Generator[Event, None, None], answers: list[tuple[str, str]]
) -> Generator[Event]:
    with closing(events):
        for event in events:
            if isinstance(event, Finished):
                answers.append((event.finish_reason, event.text))
            yield event


class FailingStore(ChatStore):
    """A real database whose next write (`times` writes) of the named kind fails as a full
    disk would."""

    fail: str | None = None
    times = 1

    def _maybe_fail(self, kind: str) -> None:
        if self.fail == kind:
            self.times -= 1
            if self.times == 0:
                self.fail, self.times = None, 1
            raise sqlite3.OperationalError("database or disk is full")

    def add_message(
        self, conversation_id: int, role: str, content: str, status: Status = "complete"
    ) -> int:
        self._maybe_fail("add")
        return super().add_message(conversation_id, role, content, status)

    def update_message(
        self,
        message_id: int,
        content: str,
        status: Status,
        spans: list[tuple[int, str, int]],
        stats: str | None = None,
    ) -> None:
        self._maybe_fail("update")
        super().update_message(message_id, content, status, spans, stats)


def _errors(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == "error"]


def _statuses(app: ChatApp) -> list[tuple[str, str]]:
    return [(view.role, view.status) for view in app.chat.query(MessageView)]


def _traces(caplog: pytest.LogCaptureFixture) -> list[BaseException]:
    return [r.exc_info[1] for r in caplog.records if r.exc_info and r.exc_info[1] is not None]


async def test_a_generation_that_raises_keeps_the_conversation_and_the_prompt(
    tiny_target: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = ChatApp(launch(tiny_target), factory=Faulty, store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hello")
        await answered(pilot, screen)
        assert isinstance(screen.host.runtime, Faulty)
        screen.host.runtime.fail_after = 0
        await send(pilot, "and then?")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        (error,) = _errors(app)
        assert error.startswith(
            f"unexpected error while generating the answer (RuntimeError: {BOOM})"
        )
        assert "\n" not in error
        assert [str(e) for e in _traces(caplog)] == [BOOM]
        # nothing was streamed: the question is taken back into the prompt, the rest stays
        assert app.is_running and screen.turn is None
        assert _statuses(app) == [("user", "complete"), ("assistant", "complete")]
        assert screen.query_one(PromptInput).text == "and then?"
        stored = app.store.messages(screen.conversation_id or 0)
        assert [(m.role, m.status) for m in stored] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert stored[0].content == "hello"
        # the runtime is still usable: the same question is answered in full
        await pilot.press("enter")
        await answered(pilot, screen)
        assert [status for _, status in _statuses(app)] == ["complete"] * 4


async def test_an_answer_that_breaks_mid_stream_is_kept_as_interrupted(
    tiny_target: Path, tmp_path: Path
) -> None:
    # ignore_eos: the tiny model cannot end the answer before the failure
    started = replace(launch(tiny_target, max_tokens=16), ignore_eos=True)
    app = ChatApp(started, factory=Faulty, store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        assert isinstance(screen.host.runtime, Faulty)
        screen.host.runtime.fail_after = 3
        await send(pilot, "tell me a story")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        assert app.is_running and screen.turn is None
        assert _statuses(app) == [("user", "complete"), ("assistant", "interrupted")]
        answer = screen.query(MessageView).last()
        assert len(answer.spans) == 3 and answer.content
        stored = app.store.messages(screen.conversation_id or 0)
        assert [(m.status, m.content) for m in stored] == [
            ("complete", "tell me a story"),
            ("interrupted", answer.content),
        ]


async def test_a_loader_that_raises_is_reported_and_the_app_stays(
    tiny_target: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def no_device(settings: RuntimeSettings, notify: Callable[[str], None]) -> Runtime:
        raise OSError(19, "No such device")

    app = ChatApp(launch(tiny_target), factory=no_device, store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.chat
        await wait_until(pilot, lambda: bool(_errors(app)), "the load error")
        assert _errors(app)[0].startswith("unexpected error while loading tiny (OSError: ")
        assert [type(e) for e in _traces(caplog)] == [OSError]
        assert app.is_running and not screen.model_loading and screen.host.runtime is None
        await send(pilot, "hello")
        await wait_until(pilot, lambda: len(_errors(app)) == 2, "the refusal to send")
        assert "no model is loaded" in _errors(app)[-1]
        assert screen.query_one(PromptInput).text == "hello"


async def test_a_template_that_refuses_the_system_prompt_is_a_notification(
    tmp_path: Path,
) -> None:
    template = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}"
    model = write_tiny_model(
        tmp_path / "picky.gguf", TinySpec(chat_template=template + "{% endif %}" + CHAT_TEMPLATE)
    )
    app = ChatApp(launch(model, system="be brief"), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        # measuring the conversation (its system prompt) already renders the template
        await wait_until(pilot, lambda: bool(_errors(app)), "the measuring error")
        assert _errors(app)[0].startswith(
            "picky.gguf: its chat template failed (line 1): no system"
        )
        await send(pilot, "hello")
        await wait_until(pilot, lambda: len(_errors(app)) >= 2, "the refused turn")
        assert "no system" in _errors(app)[-1]
        assert app.is_running and screen.turn is None and not screen.query(MessageView)
        assert screen.query_one(PromptInput).text == "hello"


# the first save of the answer that fails: the checkpoint of its first chunk (while its
# generation runs on), or, with no checkpoints, the final save (after the generation ended)
@pytest.mark.parametrize("checkpoint_s", [0.0, math.inf], ids=["checkpoint", "final-save"])
async def test_a_store_that_fails_while_saving_the_answer_stops_it_and_keeps_the_text(
    tiny_target: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, checkpoint_s: float
) -> None:
    store = FailingStore(tmp_path / "c")
    app = ChatApp(launch(tiny_target), store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        screen.checkpoint_s = checkpoint_s
        store.fail = "update"
        await send(pilot, "hello")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        assert _errors(app)[0].startswith(
            "unexpected error while saving the answer (OperationalError: database or disk is full)"
        )
        assert [type(e) for e in _traces(caplog)] == [sqlite3.OperationalError]
        assert app.is_running and screen.turn is None
        assert _statuses(app) == [("user", "complete"), ("assistant", "interrupted")]
        # the store took the next write: the stopped answer is saved as interrupted
        stored = app.store.messages(screen.conversation_id or 0)
        assert [m.status for m in stored] == ["complete", "interrupted"]
        assert stored[1].content == screen.query(MessageView).last().content
        # the next answer is saved as usual
        screen.checkpoint_s = CHECKPOINT_S
        await send(pilot, "again")
        await answered(pilot, screen)
        assert _statuses(app)[-1] == ("assistant", "complete")


async def test_a_store_that_keeps_failing_stops_the_answer_and_the_app_stays(
    tiny_target: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FailingStore(tmp_path / "c")
    app = ChatApp(launch(tiny_target), store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        screen.checkpoint_s = 0.0
        store.fail, store.times = "update", 2  # the first checkpoint, and marking it stopped
        await send(pilot, "hello")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        await wait_until(
            pilot, lambda: _statuses(app)[-1] == ("assistant", "interrupted"), "the stopped answer"
        )
        assert app.is_running and screen.turn is None and len(_errors(app)) == 1
        assert [type(e) for e in _traces(caplog)] == [sqlite3.OperationalError] * 2
        # the store still says streaming: the next start marks it interrupted
        stored = app.store.messages(screen.conversation_id or 0)
        assert [m.status for m in stored] == ["complete", "streaming"]
        await send(pilot, "again")
        await answered(pilot, screen)
        assert _statuses(app)[-1] == ("assistant", "complete")


async def test_late_events_of_a_stopped_turn_do_not_reach_the_next_one(
    tiny_target: Path, tmp_path: Path
) -> None:
    store = FailingStore(tmp_path / "c")
    # ignore_eos: neither answer can end before its 16 tokens
    started = replace(launch(tiny_target, max_tokens=16), ignore_eos=True)
    app = ChatApp(started, factory=Held, store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        runtime = screen.host.runtime
        assert isinstance(runtime, Held)
        release = runtime.hold = threading.Event()
        screen.checkpoint_s = 0.0  # the first chunk's checkpoint is the write that fails
        store.fail = "update"
        await send(pilot, "hello")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        assert screen.turn is None and _statuses(app)[-1] == ("assistant", "interrupted")
        stopped = screen.query(MessageView).last().content
        # the stopped turn's second step is still running when the next turn starts
        await send(pilot, "again")
        await wait_until(pilot, lambda: screen.turn is not None, "the next turn")
        release.set()
        await answered(pilot, screen)
        (late_end, late_text), (end, text) = runtime.answers
        # the stopped generation ran its second step, then saw the cancel
        assert late_end == "cancelled" and late_text.startswith(stopped) and late_text != stopped
        answer = screen.query(MessageView).last()
        assert (end, answer.status, answer.content) == ("length", "complete", text)
        assert screen.stats is not None and screen.stats.final is not None
        assert screen.stats.final.generated_tokens == 16
        assert screen.query_one(PromptInput).text == ""  # no cancel put "again" back
        assert _statuses(app) == [
            ("user", "complete"),
            ("assistant", "interrupted"),
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert screen.query(MessageView)[1].content == stopped  # the late chunk went nowhere
        stored = app.store.messages(screen.conversation_id or 0)
        assert [(m.status, m.content) for m in stored[2:]] == [
            ("complete", "again"),
            ("complete", text),
        ]


async def test_a_store_that_refuses_the_prompt_keeps_it_in_the_input(
    tiny_target: Path, tmp_path: Path
) -> None:
    store = FailingStore(tmp_path / "c")
    app = ChatApp(launch(tiny_target), store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        store.fail = "add"
        await send(pilot, "hello")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        assert "while saving the prompt (OperationalError" in _errors(app)[0]
        assert app.is_running and screen.turn is None and not screen.query(MessageView)
        assert screen.query_one(PromptInput).text == "hello"


def test_the_log_goes_to_a_file_while_the_app_owns_the_terminal(tmp_path: Path) -> None:
    from tui.failures import divert_logging  # noqa: PLC0415

    root = logging.getLogger()
    terminal = logging.StreamHandler()  # what logging.basicConfig installs: stderr
    root.addHandler(terminal)
    try:
        with divert_logging(tmp_path / "log" / "chat.log"):
            assert terminal not in root.handlers
            logging.getLogger("tui").error("while the app runs")
        assert terminal in root.handlers
    finally:
        root.removeHandler(terminal)
    assert "ERROR tui: while the app runs" in (tmp_path / "log" / "chat.log").read_text()


def test_the_log_file_is_private_and_never_written_through_a_link(tmp_path: Path) -> None:
    from localspec.paths import PrivatePathError  # noqa: PLC0415
    from tui.failures import divert_logging  # noqa: PLC0415

    folder = tmp_path / "state" / "log"
    with divert_logging(folder / "chat.log"):
        logging.getLogger("tui").error("while the app runs")
    assert stat.S_IMODE((folder / "chat.log").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700  # a missing parent too
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    (folder / "linked.log").symlink_to(elsewhere)
    with (
        pytest.raises(PrivatePathError, match="symbolic link"),
        divert_logging(folder / "linked.log"),
    ):
        pass
    assert elsewhere.read_text() == "someone's notes"
