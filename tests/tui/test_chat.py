"""The chat app driven with Pilot on the tiny models: send, stream, cancel, context, errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Label, Markdown

from localspec import SpecMode
from tests.tui.helpers import SIZE, answered, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.settings import ChatSettings
from tui.store import ChatStore
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.status import StatusBar

pytestmark = pytest.mark.anyio


def _errors(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == "error"]


def _label(app: ChatApp, widget_id: str) -> str:
    return str(app.screen.query_one(StatusBar).query_one(f"#{widget_id}", Label).content)


async def test_send_streams_the_answer_and_saves_both_messages(
    tiny_target: Path, tiny_draft_exact: Path, tmp_path: Path
) -> None:
    app = ChatApp(
        launch(tiny_target, tiny_draft_exact, mode=SpecMode.DRAFT, max_tokens=24),
        store=ChatStore(tmp_path / "chat.sqlite3"),
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "Write a function that adds two numbers")
        await answered(pilot, screen)
        user, answer = screen.query(MessageView)
        assert (user.role, user.content) == ("user", "Write a function that adds two numbers")
        assert answer.role == "assistant" and answer.status == "complete"
        # streamed step by step: one span per target step, and the Markdown holds it all
        assert len(answer.spans) > 1
        assert sum(length for length, _, _ in answer.spans) == len(answer.content)
        assert answer.query_one(Markdown).source == answer.content
        assert screen.stats is not None and screen.stats.final is not None
        final = screen.stats.final
        assert final.mode == "draft" and 0 < final.generated_tokens <= 24
        # the exact draft's tokens are all accepted, and the bar shows the engine's figures
        assert final.accepted == final.drafted > 0
        assert _label(app, "acceptance") == "accept 100%"
        assert _label(app, "speed").endswith(" tok/s") and "--" not in _label(app, "speed")
        assert _label(app, "mean-length") == f"len {final.mean_acceptance_length:.2f}"
        assert screen.sub_title == "Write a function that adds two numbers"
        stored = app.store.messages(screen.conversation_id or 0)
        assert [(m.role, m.status) for m in stored] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert stored[1].content == answer.content and stored[1].spans == answer.spans
        assert stored[1].stats is not None and '"mode": "draft"' in stored[1].stats


async def test_escape_cancels_within_one_step_and_restores_the_prompt(
    tiny_target: Path, tmp_path: Path
) -> None:
    app = ChatApp(
        launch(tiny_target, n_ctx=1024, max_tokens=900), store=ChatStore(tmp_path / "c.db")
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        # holding the runtime's lock keeps the turn from starting until Escape was pressed;
        # the engine checks the cancel before each target step, so not one step runs
        with screen.host.lock:
            await send(pilot, "tell me a long story")
            await wait_until(pilot, lambda: screen.turn is not None, "the turn to start")
            await pilot.press("escape")
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        assert answer.status == "cancelled"
        assert "cancelled" in str(answer.query_one(".role").render())
        assert screen.stats is not None and screen.stats.final is None
        assert screen.stats.steps == 0 and len(answer.spans) == 0
        assert screen.query_one(PromptInput).text == "tell me a long story"
        stored = app.store.messages(screen.conversation_id or 0)
        assert [m.status for m in stored] == ["complete", "cancelled"]
        assert stored[1].content == answer.content
        # sending the restored prompt again answers it in full
        screen.settings = ChatSettings(max_tokens=8, spec_mode=SpecMode.OFF)
        await pilot.press("enter")
        await answered(pilot, screen)
        assert [m.status for m in screen.query(MessageView)] == [
            "complete",
            "cancelled",
            "complete",
            "complete",
        ]


async def test_context_meter_warns_and_overflow_is_refused(
    tiny_target: Path, tmp_path: Path
) -> None:
    app = ChatApp(launch(tiny_target, n_ctx=256, max_tokens=16), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        assert screen.host.runtime is not None
        n_ctx = screen.host.runtime.n_ctx
        meter = screen.query_one(StatusBar).query_one("#context")
        too_long = "word " * n_ctx
        await send(pilot, too_long)
        await wait_until(pilot, lambda: bool(_errors(app)), "the refusal")
        assert f"the context window holds {n_ctx}" in _errors(app)[0]
        assert screen.turn is None and not screen.query(MessageView)
        assert screen.query_one(PromptInput).text == too_long  # nothing typed is lost
        assert app.store.conversations() == []  # the refused turn left nothing behind
        screen.query_one(PromptInput).clear()
        # one byte-level token per "x": prompt and answer pass 80% of the window but fit
        await send(pilot, "x" * int(0.75 * n_ctx))
        await answered(pilot, screen)
        assert screen.query(MessageView).last().status == "complete"
        used = screen.stats.context_used if screen.stats else 0
        assert str(meter.render()) == f"ctx {used}/{n_ctx}"
        assert 0.8 * n_ctx <= used + 16 <= n_ctx
        assert meter.has_class("warn")


async def test_an_answer_that_fills_the_context_says_so(tiny_target: Path, tmp_path: Path) -> None:
    # ignore_eos and a max tokens past the window: only the full context can end the answer
    started = replace(launch(tiny_target, n_ctx=256, max_tokens=4096), ignore_eos=True)
    app = ChatApp(started, store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        assert screen.host.runtime is not None
        n_ctx = screen.host.runtime.n_ctx
        await send(pilot, "tell me everything")
        await answered(pilot, screen)
        assert screen.stats is not None and screen.stats.final is not None
        assert screen.stats.final.finish_reason == "context"
        answer = screen.query(MessageView).last()
        assert answer.status == "complete" and answer.context_full
        header = "Assistant · cut short: the context window is full"
        assert str(answer.query_one(".role", Label).content) == header
        warnings = [n for n in app._notifications if n.severity == "warning"]
        assert [n.title for n in warnings] == ["context full"]
        assert str(warnings[0].message).startswith(
            f"the answer filled the context window ({n_ctx} tokens) and stops there: start a "
            "new conversation (ctrl+n)"
        )
        # the answer is saved whole, and reopening the conversation shows it cut short again
        conversation_id = screen.conversation_id
        assert conversation_id is not None
        (_, stored) = app.store.messages(conversation_id)
        assert (stored.status, stored.content) == ("complete", answer.content)
        await screen.action_new()
        await screen.open_conversation(conversation_id)
        reopened = screen.query(MessageView).last()
        assert reopened.context_full and str(reopened.query_one(".role", Label).content) == header
        # a question after it has no room left: refused with the counts, the prompt kept
        await send(pilot, "and then?")
        await wait_until(pilot, lambda: bool(_errors(app)), "the refusal")
        assert f"the context window holds {n_ctx}" in _errors(app)[0]
        assert screen.query_one(PromptInput).text == "and then?"


async def test_meter_is_calm_for_a_short_exchange(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target, n_ctx=512), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hi")
        await answered(pilot, screen)
        meter = screen.query_one(StatusBar).query_one("#context")
        assert str(meter.render()).endswith("/512") and not meter.has_class("warn")


async def test_engine_errors_become_notifications(tiny_target: Path, tmp_path: Path) -> None:
    # draft mode without a draft model: the engine refuses when the turn starts
    app = ChatApp(launch(tiny_target, mode=SpecMode.DRAFT), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hello")
        await wait_until(pilot, lambda: bool(_errors(app)), "the error notification")
        assert "needs a draft model" in _errors(app)[0]
        assert screen.turn is None and not screen.query(MessageView)
        assert screen.query_one(PromptInput).text == "hello"


async def test_a_model_that_fails_to_load_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.gguf"
    app = ChatApp(launch(missing), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.chat
        await wait_until(pilot, lambda: bool(_errors(app)), "the load error")
        assert not screen.model_loading and "nowhere.gguf" in _errors(app)[0]
        await send(pilot, "hello")
        await wait_until(pilot, lambda: len(_errors(app)) == 2, "the refusal to send")
        assert "no model is loaded" in _errors(app)[-1]
        assert screen.query_one(PromptInput).text == "hello"


async def test_sending_while_loading_keeps_the_prompt(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    # the load waits for the runtime's lock, so the app stays in its loading state
    held = app.host.lock.acquire()
    async with app.run_test(size=SIZE) as pilot:
        try:
            screen = app.chat
            banner = screen.query_one("#banner")
            await wait_until(pilot, lambda: banner.display, "the loading banner")
            await send(pilot, "early")
            assert screen.model_loading and not screen.query(MessageView)
            assert screen.query_one(PromptInput).text == "early"
        finally:
            app.host.lock.release()
        await ready(pilot)
        assert held and not banner.display
        await pilot.press("enter")
        await answered(pilot, screen)
        assert len(screen.query(MessageView)) == 2


async def test_regenerate_replaces_the_last_answer(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hi")
        await answered(pilot, screen)
        first = app.store.messages(screen.conversation_id or 0)[-1]
        await pilot.press("ctrl+r")

        def replaced() -> bool:
            last = app.store.messages(screen.conversation_id or 0)[-1]
            return last.id != first.id and last.status == "complete"

        await wait_until(pilot, replaced, "the new answer")
        stored = app.store.messages(screen.conversation_id or 0)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[-1].id != first.id and stored[-1].status == "complete"
        assert len(screen.query(MessageView)) == 2
        # greedy decoding: the same question gets the same answer
        assert stored[-1].content == first.content


async def test_copy_answer_and_code_block(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await pilot.press("f5")
        assert app.clipboard == ""  # nothing to copy yet, and the user is told
        await send(pilot, "hi")
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        await pilot.press("f5")
        assert app.clipboard == answer.content
        answer.content = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
        await pilot.press("f9")
        assert app.clipboard == "def add(a, b):\n    return a + b\n"


async def test_answers_are_followed_only_from_the_bottom(tiny_target: Path, tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c")
    conversation = store.create(ChatSettings(max_tokens=8, spec_mode=SpecMode.OFF).to_json())
    for n in range(6):  # taller than the window, so the view scrolls
        store.add_message(conversation.id, "user", f"question {n}\n\nmore\n\nlines")
        store.add_message(conversation.id, "assistant", f"answer {n}\n\nwith\n\nlines")
    settings = launch(tiny_target)
    app = ChatApp(
        type(settings)(**{**settings.__dict__, "conversation": conversation.id}), store=store
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        view = screen.messages_view
        await wait_until(pilot, lambda: view.max_scroll_y > 0, "a scrollable conversation")
        await send(pilot, "follow me")
        await answered(pilot, screen)
        # the last scroll waits for a refresh, which a loaded machine may take a while to reach
        await wait_until(pilot, lambda: view.is_vertical_scroll_end, "the view to follow")
        with screen.host.lock:  # the answer waits while the user scrolls up to read
            await send(pilot, "do not follow")
            # sending shows the new question
            await wait_until(pilot, lambda: view.is_vertical_scroll_end, "the new question")
            view.focus()
            await pilot.press("home")
            await pilot.pause()
        await answered(pilot, screen)
        await pilot.pause()
        assert view.scroll_y == 0  # the answer streamed in without moving the view
