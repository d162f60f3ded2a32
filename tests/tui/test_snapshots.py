"""SVG snapshots of the main screens, compared with the files in `snapshots/`.

The pytest-textual-snapshot plugin pins a syrupy that does not support pytest 9, so this is
the same idea in a few lines: render with Pilot, export Textual's SVG, compare text. Only
stored conversations are shown, the status bar's figures are fixed ones (a finished answer's
statistics, never live timings), the model label is fixed and cursors do not blink, so the
SVGs are byte-for-byte reproducible. Rendering changes between Textual releases, so the
snapshots apply to the version they were recorded with; set LOCALSPEC_UPDATE_SNAPSHOTS=1 to
record them again (and look at the diff).
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer, Input, Markdown, TextArea

from localspec import SpecMode
from tests.tui.helpers import SIZE, launch, ready, wait_until
from tests.tui.test_status import LONG_NAME, TYPICAL_CONTEXT, measured, show_live, typical
from tui.app import ChatApp
from tui.settings import ChatSettings
from tui.store import ChatStore
from tui.widgets.status import StatusBar

SNAPSHOTS = Path(__file__).parent / "snapshots"
RECORDED_WITH = "8.2.8"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        version("textual") != RECORDED_WITH,
        reason=f"snapshots were recorded with Textual {RECORDED_WITH}",
    ),
]

ANSWER = """Use `sorted` with a key:

```python
def by_length(words: list[str]) -> list[str]:
    return sorted(words, key=len)
```

It is stable, so words of equal length keep their order."""


def _store(path: Path) -> tuple[ChatStore, int]:
    store = ChatStore(path)
    settings = ChatSettings(spec_mode=SpecMode.DRAFT, max_tokens=64).to_json()
    conversation = store.create(settings, "Sort words by length")
    store.add_message(conversation.id, "user", "How do I sort words by length in Python?")
    answer = store.add_message(conversation.id, "assistant", "")
    # as the engine reports it: runs of text per target step, some with accepted drafts
    cut = ANSWER.index("def")
    spans = [(cut, "target", 0), (30, "draft", 4), (len(ANSWER) - cut - 30, "target", 0)]
    store.update_message(answer, ANSWER, "complete", spans)
    store.add_message(conversation.id, "user", "And longest first?")
    partial = store.add_message(conversation.id, "assistant", "")
    store.update_message(partial, "Pass `reverse=True`", "cancelled", [(19, "target", 0)])
    store.create("{}", "Explain the GIL")
    return store, conversation.id


async def _settled(pilot: Pilot[None]) -> None:
    """Wait for what Textual renders in the background (Markdown blocks, footer keys), and
    stop cursors blinking."""
    screen = pilot.app.screen

    def rendered() -> bool:
        blocks = all(markdown.children for markdown in screen.query(Markdown))
        return blocks and all(footer.children for footer in screen.query(Footer))

    await wait_until(pilot, rendered, "the screen to render")
    for widget in screen.query("TextArea, Input"):
        assert isinstance(widget, TextArea | Input)
        widget.cursor_blink = False  # a steady cursor, drawn before the capture below
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def _matches(app: ChatApp, name: str) -> None:
    svg = app.export_screenshot(title="localspec chat")
    expected = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("LOCALSPEC_UPDATE_SNAPSHOTS") == "1":
        expected.parent.mkdir(exist_ok=True)
        expected.write_text(svg, encoding="utf-8")
    assert expected.exists(), f"no snapshot {expected}: record with LOCALSPEC_UPDATE_SNAPSHOTS=1"
    assert svg == expected.read_text(encoding="utf-8"), f"{name} differs from {expected}"


async def _opened(tiny_target: Path, tmp_path: Path, model_label: str = "tiny") -> ChatApp:
    store, conversation_id = _store(tmp_path / "chat.sqlite3")
    settings = launch(tiny_target)
    chosen = {"conversation": conversation_id, "model_label": model_label}
    return ChatApp(type(settings)(**{**settings.__dict__, **chosen}), store=store)


async def test_main_screen(tiny_target: Path, tmp_path: Path) -> None:
    app = await _opened(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        meter = screen.query_one(StatusBar).query_one("#context")
        await wait_until(pilot, lambda: "--" not in str(meter.render()), "the context meter")
        await _settled(pilot)
        _matches(app, "main")
        await pilot.press("f4")
        await _settled(pilot)
        _matches(app, "drafts")


async def test_settings_and_help_screens(tiny_target: Path, tmp_path: Path) -> None:
    app = await _opened(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await _settled(pilot)  # the chat screen shows, dimmed, behind the dialog
        await pilot.press("f2")
        await wait_until(pilot, lambda: bool(app.screen.query("#max_tokens")), "the settings")
        await _settled(pilot)
        _matches(app, "settings")
        await pilot.press("escape", "f1")
        await wait_until(pilot, lambda: bool(app.screen.query("DataTable")), "the help")
        await _settled(pilot)
        _matches(app, "help")


@pytest.mark.parametrize(("size", "name"), [((80, 24), "status-80"), ((160, 48), "status-160")])
async def test_status_bar_with_figures(
    tiny_target: Path, tmp_path: Path, size: tuple[int, int], name: str
) -> None:
    """A long model name and an answer's figures, with files in context: at 80 columns the
    name is cut and the figures compact, at 160 everything in full."""
    app = await _opened(tiny_target, tmp_path, LONG_NAME)
    async with app.run_test(size=size) as pilot:
        show_live(await measured(pilot), typical(), TYPICAL_CONTEXT)
        await _settled(pilot)
        _matches(app, name)
