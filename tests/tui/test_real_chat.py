"""The chat app on the real Qwen2.5-Coder pair: the README's screenshot and session figures.

Selected with `pytest -m real_model -s tests/tui/test_real_chat.py` (HF_HUB_CACHE set to the
cache holding the pair). It asks a coding question, cancels a follow-up with Escape, sends the
restored prompt again, prints what the status bar showed after each answer, and saves the
screen to docs/chat.svg.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Label

from localspec.cli import build_parser
from localspec.cli.options import draft_need, runtime_settings, spec_settings
from tests.tui.helpers import answered, ready, send, wait_until
from tui.app import ChatApp
from tui.screens.chat import ChatScreen
from tui.settings import ChatSettings, Launch
from tui.widgets.message import MessageView
from tui.widgets.status import StatusBar

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]

SLOW = 600.0  # seconds: a 1.5B model on a 2-core CPU shared with other work
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "chat.svg"


def _bar(screen: ChatScreen) -> str:
    labels = screen.query_one(StatusBar).query(Label)
    return "  ".join(str(label.content) for label in labels)


async def test_real_pair_session() -> None:
    args = build_parser().parse_args(["chat", "--offline"])
    spec = spec_settings(args)
    launch = Launch(
        runtime=runtime_settings(args, draft_need(spec)),
        model_label="qwen2.5-coder-1.5b",
        defaults=ChatSettings(spec_mode=spec.mode, max_tokens=160),
        spec=spec,
    )
    app = ChatApp(launch)
    async with app.run_test(size=(110, 40)) as pilot:
        screen = await ready(pilot, SLOW)
        await send(pilot, "Write a Python function that checks whether a string is a palindrome.")
        await answered(pilot, screen, SLOW)
        print("answer 1:", _bar(screen))
        follow_up = "Now make it ignore case and punctuation, with type hints."
        await send(pilot, follow_up)
        await wait_until(
            pilot, lambda: screen.stats is not None and screen.stats.tokens >= 20, "20 tokens", SLOW
        )
        await pilot.press("escape")
        await answered(pilot, screen, SLOW)
        cancelled = screen.query(MessageView).last()
        assert cancelled.status == "cancelled"
        print(
            "cancelled after", screen.stats.tokens if screen.stats else 0, "tokens:", _bar(screen)
        )
        assert screen.prompt.text == follow_up
        await pilot.press("enter")
        await answered(pilot, screen, SLOW)
        print("resumed answer:", _bar(screen))
        assert screen.query(MessageView).last().status == "complete"
        await pilot.pause(0.5)
        SCREENSHOT.write_text(app.export_screenshot(title="localspec chat"), encoding="utf-8")
