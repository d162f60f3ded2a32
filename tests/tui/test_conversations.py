"""Conversations across restarts, switching, settings reaching the engine, the model picker."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import Input, OptionList, Select, Static

from localspec import SpecMode
from tests.tui.helpers import SIZE, answered, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.screens.dialogs import HelpScreen, TextScreen
from tui.screens.models import ModelPicker
from tui.screens.settings import SettingsScreen
from tui.settings import ChatSettings
from tui.store import ChatStore
from tui.widgets.message import DRAFT_STYLES, MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.sidebar import ConversationList
from tui.widgets.status import StatusBar

pytestmark = pytest.mark.anyio


def _contents(app: ChatApp) -> list[tuple[str, str]]:
    return [(v.role, v.content) for v in app.chat.query(MessageView)]


async def test_conversations_survive_a_restart(tiny_target: Path, tmp_path: Path) -> None:
    database = tmp_path / "chat.sqlite3"
    first = ChatApp(launch(tiny_target), store=ChatStore(database))
    async with first.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "first question")
        await answered(pilot, screen)
        shown = _contents(first)
        conversation_id = screen.conversation_id
    assert conversation_id is not None
    # a new process: the conversation is listed, and opening it shows the same messages
    again = ChatApp(launch(tiny_target), store=ChatStore(database))
    async with again.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        sidebar = screen.query_one(ConversationList)
        await wait_until(pilot, lambda: len(sidebar.children) == 1, "the saved conversation")
        assert not screen.query(MessageView)  # a restart begins a new conversation
        sidebar.focus()
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: screen.conversation_id == conversation_id, "the switch")
        assert _contents(again) == shown
        assert screen.sub_title == "first question"
        # Up recalls the earlier prompt of the conversation
        prompt = screen.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")
        assert prompt.text == "first question"


async def test_switching_conversations_switches_messages_and_settings(
    tiny_target: Path, tmp_path: Path
) -> None:
    store = ChatStore(tmp_path / "c.db")
    terse = store.create(ChatSettings(max_tokens=3, spec_mode=SpecMode.OFF).to_json(), "terse")
    store.add_message(terse.id, "user", "q1")
    store.add_message(terse.id, "assistant", "a1")
    chatty = store.create(ChatSettings(max_tokens=20, system="be brief").to_json(), "chatty")
    store.add_message(chatty.id, "user", "q2")
    store.add_message(chatty.id, "assistant", "a2", status="cancelled")
    app = ChatApp(launch(tiny_target), store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await screen.open_conversation(terse.id)
        assert _contents(app) == [("user", "q1"), ("assistant", "a1")]
        assert screen.settings.max_tokens == 3
        await send(pilot, "q3")
        await answered(pilot, screen)
        assert screen.stats is not None and screen.stats.final is not None
        assert screen.stats.final.generated_tokens <= 3  # the conversation's own max tokens
        await screen.open_conversation(chatty.id)
        assert _contents(app) == [("user", "q2"), ("assistant", "a2")]
        assert screen.query(MessageView).last().has_class("stopped")
        assert screen.settings.system == "be brief"
        assert store.conversations()[0].title == "terse"  # most recently used


async def test_settings_screen_changes_reach_the_engine(
    tiny_target: Path, tiny_draft_exact: Path, tmp_path: Path
) -> None:
    app = ChatApp(launch(tiny_target, tiny_draft_exact), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await pilot.press("f2")
        await wait_until(pilot, lambda: bool(app.screen.query("#max_tokens")), "the settings")
        dialog = app.screen
        assert isinstance(dialog, SettingsScreen)
        dialog.query_one("#max_tokens", Input).value = "0"
        await pilot.press("ctrl+s")
        assert app.screen is dialog  # refused, with the reason shown
        assert "at least 1" in str(dialog.query_one("#error").render())
        dialog.query_one("#max_tokens", Input).value = "5"
        dialog.query_one("#temperature", Input).value = "0.7"
        dialog.query_one("#spec_mode", Select).value = SpecMode.DRAFT
        dialog.query_one("#draft_max", Input).value = "2"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen is screen, "the settings to close")
        assert screen.settings == ChatSettings(
            spec_mode=SpecMode.DRAFT, draft_max=2, temperature=0.7, max_tokens=5
        )
        await send(pilot, "hello")
        await answered(pilot, screen)
        assert screen.stats is not None and screen.stats.final is not None
        final = screen.stats.final
        assert final.mode == "draft" and final.generated_tokens <= 5
        assert len(final.drafted_per_position) <= 2  # drafts of at most draft_max tokens
        saved = app.store.conversation(screen.conversation_id or 0)
        assert saved is not None and '"temperature": 0.7' in saved.settings


async def test_rename_export_and_delete(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hi")
        await answered(pilot, screen)
        await screen.run_action("rename")
        await wait_until(pilot, lambda: bool(app.screen.query(Input)), "the title field")
        app.screen.query_one(Input).value = "Greeting"
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.sub_title == "Greeting", "the new title")
        exported = tmp_path / "greeting.md"
        await pilot.press("f8")
        await wait_until(pilot, lambda: bool(app.screen.query(Input)), "the file field")
        assert isinstance(app.screen, TextScreen)
        app.screen.query_one(Input).value = str(exported)
        await pilot.press("enter")
        await wait_until(pilot, exported.exists, "the export")
        answer = screen.query(MessageView).last().content
        text = exported.read_text(encoding="utf-8")
        assert text.startswith("# Greeting\n") and "## User\n\nhi\n" in text
        assert answer.strip() in text
        await screen.run_action("delete")
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.conversation_id is None, "the deletion")
        assert app.store.conversations() == [] and not screen.query(MessageView)


async def test_draft_highlighting_toggle(
    tiny_target: Path, tiny_draft_exact: Path, tmp_path: Path
) -> None:
    app = ChatApp(
        launch(tiny_target, tiny_draft_exact, mode=SpecMode.DRAFT, max_tokens=24),
        store=ChatStore(tmp_path / "c"),
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "hello")
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        drafts = answer.query_one(".drafts")
        assert not drafts.display
        await pilot.press("f4")
        assert drafts.display and screen.has_class("show-drafts")
        assert isinstance(drafts, Static) and isinstance(drafts.content, Text)
        assert drafts.content.plain == answer.content
        marked = [s for s in drafts.content.spans if str(s.style) == DRAFT_STYLES["draft"]]
        accepted = [span for span in answer.spans if span[2] > 0]
        assert accepted and len(marked) == len(accepted)  # each step that took a draft
        await pilot.press("f4")
        assert not drafts.display


async def test_prompt_keys(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        prompt = screen.query_one(PromptInput)
        prompt.focus()
        await pilot.press("a", "ctrl+j", "b")
        assert prompt.text == "a\nb"  # a new line, not a send
        await pilot.press("enter")
        await answered(pilot, screen)
        assert _contents(app)[0] == ("user", "a\nb")
        await pilot.press("x", "up")
        assert prompt.text == "a\nb"
        await pilot.press("down", "down")
        assert prompt.text == "x"  # back to what was being typed


async def test_help_and_command_palette(tiny_target: Path, tmp_path: Path) -> None:
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        assert keys["escape"] == "Cancel" and keys["f2"] == "Settings" and "enter" in keys
        await pilot.press("escape")
        titles = {c.title for c in app.get_system_commands(screen)}
        assert {"Regenerate answer", "Model pair", "Export conversation"} <= titles


async def test_model_picker_loads_a_registry_pair(
    tiny_target: Path, tiny_draft_exact: Path, tmp_path: Path, isolated_user_dirs: Path
) -> None:
    registry = isolated_user_dirs / "config" / "localspec" / "models.toml"
    registry.parent.mkdir(parents=True)
    registry.write_text(
        f'[models.tiny-target]\npath = "{tiny_target}"\n'
        f'[models.tiny-draft]\npath = "{tiny_draft_exact}"\n'
        f'[models.gone]\npath = "{tmp_path / "gone.gguf"}"\n'
        '[pairs.tiny]\ntarget = "tiny-target"\ndraft = "tiny-draft"\n'
        'description = "test pair"\n',
        encoding="utf-8",
    )
    app = ChatApp(launch(tiny_target), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await pilot.press("f3")
        await wait_until(pilot, lambda: bool(app.screen.query(OptionList)), "the picker")
        picker = app.screen
        assert isinstance(picker, ModelPicker)
        names = [c.name for c in picker.choices]
        assert names.index("tiny") < names.index("tiny-target")  # pairs first
        options = picker.query_one(OptionList)
        options.highlighted = names.index("tiny")
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.model_label == "tiny", "the pair to load")
        assert screen.host.settings.draft == tiny_draft_exact
        assert "tiny" in str(screen.query_one(StatusBar).query_one("#model").render())
        # a model whose file is missing is reported, and no model stays loaded
        await pilot.press("f3")
        await wait_until(pilot, lambda: bool(app.screen.query(OptionList)), "the picker")
        app.screen.query_one(OptionList).highlighted = names.index("gone")
        await pilot.press("enter")
        await wait_until(
            pilot,
            lambda: any("gone.gguf" in str(n.message) for n in app._notifications),
            "the load error",
        )
