"""The files-in-context tables of the conversation database (schema: `tui.store`'s migrations).

A conversation's file set is what `/add` and `@path` built, kept so that opening the
conversation again restores it. Each user message records the version of every file it was
sent with (path, SHA-256, token cost), the text itself stored once per SHA-256: a file sent
unchanged with every turn costs one row per turn, not one copy. `last_sent` is how an edit
checks whether a file changed on disk since the model saw it.

Paths are the file set's keys: absolute paths, or `@diff` for the working tree's changes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localspec.context_files import DIFF
from tui.store import ChatStore


@dataclass(frozen=True)
class SentFile:
    """One file's version as a message sent it."""

    path: str
    sha256: str
    tokens: int
    content: str


def file_key(path: str | Path) -> str:
    """The key a file is stored under: `@diff`, or its absolute path (a relative one is taken
    from the working directory), symbolic links resolved."""
    if str(path) == DIFF:
        return DIFF
    return str(Path(path).expanduser().resolve())


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One atomic write (the connection is in autocommit mode)."""
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def file_set(store: ChatStore, conversation_id: int) -> list[str]:
    """The conversation's files, in the order they were added."""
    rows = store.db.execute(
        "SELECT path FROM context_files WHERE conversation_id = ? ORDER BY added, rowid",
        (conversation_id,),
    )
    return [row[0] for row in rows]


def add_files(store: ChatStore, conversation_id: int, paths: Sequence[str]) -> None:
    """Put `paths` in the conversation's set (those already there stay where they were)."""
    now = time.time()
    with _transaction(store.db):
        store.db.executemany(
            "INSERT OR IGNORE INTO context_files (conversation_id, path, added) VALUES (?, ?, ?)",
            [(conversation_id, path, now) for path in paths],
        )


def drop_files(store: ChatStore, conversation_id: int, paths: Sequence[str] | None) -> None:
    """Take `paths` (None: all) out of the set; what earlier messages sent stays recorded."""
    if paths is None:
        store.db.execute("DELETE FROM context_files WHERE conversation_id = ?", (conversation_id,))
        return
    with _transaction(store.db):
        store.db.executemany(
            "DELETE FROM context_files WHERE conversation_id = ? AND path = ?",
            [(conversation_id, path) for path in paths],
        )


def record_sent(store: ChatStore, message_id: int, files: Sequence[SentFile]) -> None:
    """What `message_id` was sent with, replacing an earlier record: an answer generated
    again is conditioned on the files as they are now, and the old answer is gone."""
    db = store.db
    with _transaction(db):
        # first, so that a content only the old record held is deleted (the trigger), not kept
        db.execute("DELETE FROM sent_files WHERE message_id = ?", (message_id,))
        db.executemany(
            "INSERT OR IGNORE INTO file_blobs (sha256, content) VALUES (?, ?)",
            [(f.sha256, f.content) for f in files],
        )
        db.executemany(
            "INSERT INTO sent_files (message_id, path, sha256, tokens) VALUES (?, ?, ?, ?)",
            [(message_id, f.path, f.sha256, f.tokens) for f in files],
        )


def sent_with(store: ChatStore, message_id: int) -> list[SentFile]:
    """The files `message_id` was sent with, by path."""
    rows = store.db.execute(
        "SELECT s.path, s.sha256, s.tokens, b.content FROM sent_files s "
        "JOIN file_blobs b ON b.sha256 = s.sha256 WHERE s.message_id = ? ORDER BY s.path",
        (message_id,),
    )
    return [SentFile(*row) for row in rows]


def last_sent(store: ChatStore, conversation_id: int, path: str | Path) -> tuple[str, str] | None:
    """(SHA-256, content) of the version of `path` most recently sent in the conversation,
    or None when it was never sent there."""
    row = store.db.execute(
        "SELECT s.sha256, b.content FROM sent_files s "
        "JOIN messages m ON m.id = s.message_id JOIN file_blobs b ON b.sha256 = s.sha256 "
        "WHERE m.conversation_id = ? AND s.path = ? ORDER BY s.message_id DESC LIMIT 1",
        (conversation_id, file_key(path)),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def last_user_message(store: ChatStore, conversation_id: int) -> int | None:
    """The id of the conversation's latest user message (the one an answer is for)."""
    row = store.db.execute(
        "SELECT max(id) FROM messages WHERE conversation_id = ? AND role = 'user'",
        (conversation_id,),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])
