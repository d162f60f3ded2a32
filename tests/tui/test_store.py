"""The conversation database and the pure helpers around it, without the app."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from localspec import GenerationStats, SpecMode, TextChunk
from tui.conversation import (
    export_name,
    filled_context,
    last_code_block,
    model_messages,
    title_from,
)
from tui.generation import LiveStats, Started, overflow_message
from tui.settings import ChatSettings, SettingsError
from tui.store import SCHEMA_VERSION, ChatStore, StoredMessage, StoreError, default_path


def test_store_is_wal_versioned_and_in_the_data_dir(isolated_user_dirs: Path) -> None:
    store = ChatStore()
    assert store.path == default_path()
    assert store.path.is_relative_to(isolated_user_dirs / "data")
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chat.sqlite3"
    ChatStore(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer localspec"):
        ChatStore(path)


def test_an_answer_streaming_at_a_crash_reopens_as_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "chat.sqlite3"
    store = ChatStore(path)
    conversation = store.create("{}")
    store.add_message(conversation.id, "user", "q")
    answer = store.add_message(conversation.id, "assistant", "", "streaming")
    store.update_message(answer, "half an ans", "streaming", [(4, "target", 0), (7, "draft", 2)])
    # no close(): the process died; a second connection sees every committed write
    reopened = ChatStore(path)
    assert [(m.content, m.status) for m in reopened.messages(conversation.id)] == [
        ("q", "complete"),
        ("half an ans", "interrupted"),
    ]
    assert reopened.messages(conversation.id)[1].spans == [(4, "target", 0), (7, "draft", 2)]


def test_ids_are_not_reused_and_deleting_cascades(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c")
    first = store.create("{}", "one")
    message = store.add_message(first.id, "user", "q")
    store.delete(first.id)
    second = store.create("{}", "two")
    assert second.id != first.id
    assert store.add_message(second.id, "user", "q") != message
    assert [c.title for c in store.conversations()] == ["two"]


def _message(id_: int, role: str, content: str, status: str = "complete") -> StoredMessage:
    return StoredMessage(id_, role, content, status, [], None)  # type: ignore[arg-type]


def test_a_cancelled_exchange_is_not_sent_to_the_model() -> None:
    stored = [
        _message(1, "user", "q1"),
        _message(2, "assistant", "a1"),
        _message(3, "user", "q2"),
        _message(4, "assistant", "half", "cancelled"),
        _message(5, "user", "q2 again"),
    ]
    sent = model_messages(stored, "be brief")
    assert [(m.role, m.content) for m in sent] == [
        ("system", "be brief"),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2 again"),
    ]


def test_text_helpers() -> None:
    assert title_from("  Explain this\nmore lines") == "Explain this"
    assert title_from("word " * 30).endswith("…") and len(title_from("word " * 30)) <= 49
    answer = "a\n```py\nfirst\n```\ntext\n~~~\nsecond\nline\n~~~\n"
    assert last_code_block(answer) == "second\nline\n"
    assert last_code_block("no code") is None
    assert export_name("What's up? (v2)", 7) == "what-s-up-v2-7.md"


def test_chat_settings_validate_and_round_trip() -> None:
    settings = ChatSettings(system="s", spec_mode=SpecMode.NGRAM, temperature=0.5, max_tokens=9)
    assert ChatSettings.from_json(settings.to_json(), ChatSettings()) == settings
    # unknown keys are ignored and broken values fall back, so any saved row opens
    assert ChatSettings.from_json('{"max_tokens": 3, "future": 1}', settings).max_tokens == 3
    assert ChatSettings.from_json('{"top_p": 7}', settings) == settings
    assert ChatSettings.from_json("not json", settings) == settings
    form = {
        "system": "",
        "spec_mode": "off",
        "draft_max": "2",
        "temperature": "0",
        "top_p": "0.9",
        "max_tokens": "7",
    }
    assert ChatSettings.from_form(form).top_p == 0.9
    with pytest.raises(SettingsError, match="temperature must be a number"):
        ChatSettings.from_form({**form, "temperature": "hot"})
    with pytest.raises(SettingsError, match="top_p"):
        ChatSettings.from_form({**form, "top_p": "0"})


def test_live_stats_follow_the_chunks_then_the_engine() -> None:
    live = LiveStats(started=0.0)
    live.on_started(Started(prompt_tokens=30, n_ctx=256))
    live.on_chunk(TextChunk("ab", [1, 2], "target", 0), now=0.5)
    live.on_chunk(TextChunk("cdef", [3, 4, 5, 6], "draft", 3, drafted=4), now=1.5)
    assert live.ttft_s == 0.5
    assert live.tokens_per_second == pytest.approx(5 / 1.0)
    assert live.acceptance_rate == 0.75 and live.mean_acceptance_length == 3.0
    assert live.proposer == "draft:4" and live.context_used == 36
    final = GenerationStats(mode="draft", generated_tokens=6, total_s=2.0, ttft_s=0.4)
    live.on_finished(final)
    assert live.ttft_s == 0.4 and live.tokens_per_second == 3.0


def test_overflow_message_names_both_counts() -> None:
    # an answer that may pass the window starts (it is cut short, and says so, if it does)
    assert overflow_message(127, 128) is None
    assert overflow_message(128, 128) is not None  # not one token of room
    message = overflow_message(130, 128)
    assert message is not None and "130 tokens" in message and "holds 128" in message


def test_odd_values_in_the_database_open_as_defaults(tmp_path: Path) -> None:
    """A database edited by hand or damaged: spans, statistics and settings that are not what
    localspec wrote (JSON nested beyond the parser's depth included) read as none."""
    path = tmp_path / "chat.sqlite3"
    store = ChatStore(path)
    conversation = store.create("{}")
    answer = store.add_message(conversation.id, "assistant", "an answer")
    nested = "[" * 200_000
    for spans in (nested, "abc", '[["x", 1]]', "[1, 2]"):
        store.update_message(answer, "an answer", "complete", [], stats=nested)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE messages SET spans = ? WHERE id = ?", (spans, answer))
        [message] = ChatStore(path).messages(conversation.id)
        assert (message.content, message.spans) == ("an answer", [])
        assert not filled_context(message)
    assert ChatSettings.from_json(nested, ChatSettings()) == ChatSettings()
