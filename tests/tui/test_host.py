"""The model host renders and counts a conversation once, however often the context meter
and the turn ask (real tiny model, no app)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from localspec import Finished, Message, Runtime, RuntimeSettings, SamplingSettings, SpecSettings
from tui.generation import Turn, TurnEvent, run_turn
from tui.host import PROMPTS_KEPT, ModelHost
from tui.settings import ChatSettings


def counting_host(tiny_target: Path) -> tuple[ModelHost, list[int]]:
    """A host over the tiny model whose every chat-prompt render is counted."""
    renders: list[int] = []

    def factory(settings: RuntimeSettings, _notify: Callable[[str], None]) -> Runtime:
        runtime = Runtime(settings)
        render = runtime.prompts.chat_prompt

        def counted(messages: Sequence[Message], *args: object) -> list[int]:
            renders.append(len(messages))
            return render(messages, *args)  # type: ignore[arg-type]

        runtime.prompts.chat_prompt = counted  # type: ignore[method-assign,assignment]
        return runtime

    host = ModelHost(factory, RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1))
    host.load(lambda _line: None)
    return host, renders


def test_a_conversation_is_rendered_once_for_the_meter_and_the_turn(tiny_target: Path) -> None:
    host, renders = counting_host(tiny_target)
    try:
        conversation = [Message("user", "def add(a, b):")]
        first = host.measure(conversation)
        assert host.measure(conversation) == first and first[0] > 0
        events: list[TurnEvent] = []
        turn = Turn(conversation, ChatSettings(max_tokens=4), SamplingSettings(), SpecSettings())
        backend = host.backend
        assert backend is not None
        run_turn(backend, host.lock, turn, threading.Event(), events.append)
        assert isinstance(events[-1], Finished)
        assert renders == [1]  # measured twice and sent: rendered once
        answered = [*conversation, Message("assistant", events[-1].text)]
        assert host.measure(answered)[0] > first[0]
        assert renders == [1, 2]
        for n in range(PROMPTS_KEPT):  # older conversations are forgotten, newest kept
            host.measure([Message("user", f"question {n}")])
        host.measure(conversation)
        assert renders[-1] == 1 and len(renders) == 2 + PROMPTS_KEPT + 1
    finally:
        host.close()


def test_loading_again_forgets_what_was_counted(tiny_target: Path) -> None:
    host, renders = counting_host(tiny_target)
    try:
        conversation = [Message("user", "hello")]
        host.measure(conversation)
        host.load(lambda _line: None)  # another model may count differently
        host.measure(conversation)
        assert renders == [1, 1]
    finally:
        host.close()
