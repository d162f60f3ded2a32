"""The files-in-context tables: a conversation's set, the versions each message was sent with."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tui import store_files
from tui.store import _MIGRATIONS, SCHEMA_VERSION, ChatStore
from tui.store_files import SentFile, last_sent, record_sent, sent_with


def _sent(path: str, content: str, tokens: int = 3) -> SentFile:
    return SentFile(path, hashlib.sha256(content.encode()).hexdigest(), tokens, content)


def _blobs(store: ChatStore) -> int:
    return int(store.db.execute("SELECT count(*) FROM file_blobs").fetchone()[0])


def test_the_set_is_kept_per_conversation_in_the_order_added(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    one, two = store.create("{}").id, store.create("{}").id
    store_files.add_files(store, one, ["/w/b.py", "/w/a.py"])
    store_files.add_files(store, one, ["/w/a.py", "@diff"])  # a.py stays where it was
    store_files.add_files(store, two, ["/w/c.py"])
    assert store_files.file_set(store, one) == ["/w/b.py", "/w/a.py", "@diff"]
    store_files.drop_files(store, one, ["/w/b.py"])
    assert store_files.file_set(store, one) == ["/w/a.py", "@diff"]
    store_files.drop_files(store, one, None)
    assert store_files.file_set(store, one) == []
    assert store_files.file_set(store, two) == ["/w/c.py"]
    store.close()
    reopened = ChatStore(tmp_path / "c.db")  # kept on disk
    assert store_files.file_set(reopened, two) == ["/w/c.py"]


def test_each_message_records_its_versions_and_last_sent_finds_the_latest(
    tmp_path: Path,
) -> None:
    store = ChatStore(tmp_path / "c.db")
    conversation = store.create("{}").id
    key = str(tmp_path / "x.py")
    first = store.add_message(conversation, "user", "q1")
    record_sent(store, first, [_sent(key, "v1"), _sent("@diff", "")])
    store.add_message(conversation, "assistant", "a1")
    second = store.add_message(conversation, "user", "q2")
    record_sent(store, second, [_sent(key, "v2", tokens=9)])
    assert sent_with(store, first) == [_sent(key, "v1"), _sent("@diff", "")]  # by path
    assert sent_with(store, second) == [_sent(key, "v2", tokens=9)]
    assert last_sent(store, conversation, key) == (_sent(key, "v2").sha256, "v2")
    assert last_sent(store, conversation, "@diff") == (_sent("@diff", "").sha256, "")
    assert last_sent(store, conversation, tmp_path / "other.py") is None
    assert last_sent(store, store.create("{}").id, key) is None  # per conversation
    assert store_files.last_user_message(store, conversation) == second


def test_last_sent_takes_a_relative_path_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = ChatStore(tmp_path / "c.db")
    conversation = store.create("{}").id
    message = store.add_message(conversation, "user", "q")
    record_sent(store, message, [_sent(str(tmp_path / "src" / "x.py"), "v1")])
    assert last_sent(store, conversation, "src/x.py") == (_sent("", "v1").sha256, "v1")


def test_a_content_is_stored_once_and_deleted_with_its_last_reference(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    conversation = store.create("{}").id
    messages = [store.add_message(conversation, "user", f"q{i}") for i in range(3)]
    for message in messages:  # the same file, unchanged, with every turn
        record_sent(store, message, [_sent("/w/x.py", "same")])
    assert _blobs(store) == 1
    # a message sent again (regenerate) replaces its record; the old version goes when unused
    record_sent(store, messages[2], [_sent("/w/x.py", "changed")])
    assert _blobs(store) == 2
    record_sent(store, messages[2], [_sent("/w/x.py", "changed again")])
    assert _blobs(store) == 2
    store.delete_message(messages[0])
    assert [s.content for s in sent_with(store, messages[1])] == ["same"]
    # deleting the conversation deletes its messages, their records and the code they held
    store.delete(conversation)
    assert _blobs(store) == 0
    assert store.db.execute("SELECT count(*) FROM sent_files").fetchone()[0] == 0


def test_a_version_1_database_gains_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(f"{_MIGRATIONS[0]} PRAGMA user_version = 1;")
    db.execute("INSERT INTO conversations (title, created, updated) VALUES ('old', 0, 0)")
    db.commit()
    db.close()
    store = ChatStore(path)
    assert int(store.db.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION
    (old,) = store.conversations()
    store_files.add_files(store, old.id, ["/w/a.py"])
    assert store_files.file_set(store, old.id) == ["/w/a.py"]
