"""Driving the chat app in tests: launch settings for the tiny models and a polling wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from localspec import RuntimeSettings, SpecMode
from tui.app import ChatApp
from tui.screens.chat import ChatScreen
from tui.settings import ChatSettings, Launch
from tui.widgets.prompt import PromptInput

SIZE = (100, 30)


def launch(
    target: Path,
    draft: Path | None = None,
    *,
    n_ctx: int = 512,
    mode: SpecMode = SpecMode.OFF,
    max_tokens: int = 16,
    system: str = "",
) -> Launch:
    """Tiny models, one thread, a short answer: a turn takes milliseconds."""
    return Launch(
        runtime=RuntimeSettings(target=target, draft=draft, n_ctx=n_ctx, n_threads=1),
        model_label="tiny",
        defaults=ChatSettings(system=system, spec_mode=mode, max_tokens=max_tokens),
    )


async def wait_until(
    pilot: Pilot[None], condition: Callable[[], bool], what: str, timeout: float = 60.0
) -> None:
    """Let the app run until `condition` holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.02)


def chat(app: ChatApp) -> ChatScreen:
    return app.chat


async def ready(pilot: Pilot[None], timeout: float = 15.0) -> ChatScreen:
    """The chat screen once its model has loaded (or its server is connected)."""
    assert isinstance(pilot.app, ChatApp)
    screen = pilot.app.chat
    await wait_until(
        pilot,
        lambda: not screen.model_loading and screen.host.backend is not None,
        "the model to load",
        timeout,
    )
    return screen


async def send(pilot: Pilot[None], text: str) -> None:
    """Type `text` into the prompt and press Enter."""
    prompt = pilot.app.query_one(PromptInput)
    prompt.focus()
    prompt.insert(text)
    await pilot.press("enter")


async def answered(pilot: Pilot[None], screen: ChatScreen, timeout: float = 15.0) -> None:
    await wait_until(pilot, lambda: screen.turn is None, "the answer to finish", timeout)
