"""Slots over one pair of contexts (`localspec.server.slots`), on the tiny models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec import Runtime, RuntimeSettings
from localspec.server.slots import Slots


@pytest.fixture(scope="module")
def runtime(tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(tiny_target, tiny_draft_exact, n_ctx=1024, n_threads=1)
    with Runtime(settings) as loaded:
        loaded.load_draft()
        yield loaded


@pytest.fixture
def slots(runtime: Runtime) -> Slots:
    runtime.models.target_context.truncate(0)
    assert runtime.models.draft_context is not None
    runtime.models.draft_context.truncate(0)
    return Slots(runtime, 3)


def _tokens(runtime: Runtime, text: str) -> list[int]:
    return runtime.prompts.tokenize(text)


def test_a_slot_gets_back_exactly_the_caches_it_left(runtime: Runtime, slots: Slots) -> None:
    target, draft = runtime.models.target_context, runtime.models.draft_context
    assert draft is not None
    first, second = slots.slots[0], slots.slots[1]
    chat = _tokens(runtime, "def parse(text):\n    return text.split()\n")
    target.prefill(chat[:-1])
    draft.prefill(chat[:-3])
    expected = target.decode(chat[-1:], logits="last")[0]
    target.truncate(len(chat) - 1)
    slots.activate(second)
    assert target.n_past == 0 and draft.n_past == 0  # a new slot starts empty
    target.prefill(_tokens(runtime, "class Stack:\n    pass\n"))
    slots.activate(first)
    assert list(target.tokens) == chat[:-1]
    assert list(draft.tokens) == chat[:-3]
    again = target.decode(chat[-1:], logits="last")[0]
    np.testing.assert_array_equal(again, expected)
    assert slots.exchanges == 2
    assert len(slots.tokens(second)) > 0  # the other slot's cache waits in host memory


def test_choice_prefers_the_asked_slot_then_the_longest_prefix_then_the_route(
    runtime: Runtime, slots: Slots
) -> None:
    target = runtime.models.target_context
    chat = _tokens(runtime, "def parse(text):\n    return text.split()\n")
    editor = _tokens(runtime, "class Stack:\n    pass\n")
    first = slots.choose(chat, "chat")
    assert first is not None and first.id == 0
    target.prefill(chat)
    slots.release(first)
    second = slots.choose(editor, "infill")  # shares nothing: the least recently used
    assert second is not None and second.id == 1
    slots.activate(second)
    target.prefill(editor)
    slots.release(second)
    assert slots.choose([*chat, 5, 6], "chat") is first  # the longest common prefix
    slots.release(first)
    assert slots.choose([7] * 5, "infill") is second  # no prefix: the route's slot
    slots.release(second)
    assert slots.choose([7] * 5, "infill", wanted=4) is second  # 4 modulo 3
    assert slots.choose([7] * 5, "infill", wanted=1) is not second  # busy: another one


def test_a_busy_slot_is_never_chosen_and_none_when_all_are(slots: Slots) -> None:
    taken = [slots.choose([1, 2, 3], "chat") for _ in range(3)]
    assert {slot.id for slot in taken if slot is not None} == {0, 1, 2}
    assert slots.choose([1, 2, 3], "chat") is None
    slots.release(taken[1])  # type: ignore[arg-type]
    assert slots.choose([1, 2, 3], "chat", wanted=0) is taken[1]


def test_each_slot_has_its_own_ngram_index_and_slot_zero_the_runtimes(
    runtime: Runtime, slots: Slots
) -> None:
    proposers = [slot.ngram for slot in slots.slots]
    assert proposers[0] is runtime.ngram
    assert len({id(proposer) for proposer in proposers}) == 3
    assert all(proposer.cache is runtime.ngram.cache for proposer in proposers)


def test_describe_says_what_each_slot_holds(runtime: Runtime, slots: Slots) -> None:
    chat = _tokens(runtime, "def parse(text):\n    return text.split()\n")
    slot = slots.choose(chat, "chat")
    assert slot is not None
    runtime.models.target_context.prefill(chat)
    described = slots.describe()
    assert [entry["id"] for entry in described] == [0, 1, 2]
    assert described[0]["is_processing"] is True and described[0]["n_cached"] == len(chat)
    assert described[0]["route"] == "chat" and described[1]["n_cached"] == 0
    assert all(entry["n_ctx"] == runtime.n_ctx for entry in described)


def test_one_slot_is_the_runtime_alone(runtime: Runtime) -> None:
    single = Slots(runtime, 1)
    slot = single.choose([1, 2, 3], "chat", wanted=7)
    assert slot is single.active and slot.ngram is runtime.ngram
    single.activate(slot)
    assert single.exchanges == 0
    with pytest.raises(ValueError, match="at least one slot"):
        Slots(runtime, 0)


def test_an_asked_slot_that_holds_nothing_of_the_prompt_yields_to_one_that_does(
    runtime: Runtime, slots: Slots
) -> None:
    """llama.vim asks for slot 0 on every request: after a chat took slot 0, its requests
    go where its cache is, not where it would be processed again."""
    target = runtime.models.target_context
    chat = _tokens(runtime, "def parse(text):\n    return text.split()\n")
    editor = _tokens(runtime, "class Stack:\n    pass\n")
    first = slots.choose(chat, "chat", wanted=0)
    assert first is not None and first.id == 0
    target.prefill(chat)
    second = slots.choose(editor, "infill", wanted=0)  # slot 0 is busy
    assert second is not None and second.id != 0
    slots.activate(second)
    target.prefill(editor)
    slots.release(first)
    slots.release(second)
    assert slots.choose([*editor, 9], "infill", wanted=0) is second
    slots.release(second)
    assert slots.choose([*chat, 9], "chat", wanted=0) is first  # asked and similar
    slots.release(first)
    assert slots.choose([7, 7, 7], "other", wanted=2) is slots.slots[2]  # nothing similar
