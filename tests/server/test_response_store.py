"""The Responses API's store of conversations: bounded by count and by every character it
keeps, ids included."""

from __future__ import annotations

from localspec.messages import Message
from localspec.server.response_store import ResponseStore
from localspec.tools.calls import ToolCall


def _turns(call_id: str) -> tuple[Message, ...]:
    call = ToolCall(call_id, "f", "{}")
    return (
        Message("user", "q"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "ok", tool_call_id=call_id),
    )


def test_call_ids_count_toward_the_bound() -> None:
    """Found by fuzzing: ids a chat template never renders were kept uncounted, so 256
    bodies of long ids held ~2 GB against a 64 M-character bound."""
    store = ResponseStore(max_characters=10_000)
    for i in range(10):
        store.put(f"resp_{i}", _turns("c" * 3_000 + str(i)))
    assert store.characters <= 10_000
    assert len(store) == 1  # each conversation keeps two 3,001-character ids
    assert store.get("resp_9") is not None and store.get("resp_0") is None


def test_a_response_put_again_is_counted_once() -> None:
    store = ResponseStore()
    store.put("resp_1", _turns("a"))
    once = store.characters
    store.put("resp_1", _turns("a"))
    assert (store.characters, len(store)) == (once, 1)
