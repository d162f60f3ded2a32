"""Conversations on disk: one SQLite file in the user data dir, written as the chat goes.

Every message is committed when it appears, and an answer being generated is checkpointed
while it streams, so killing the app loses at most the last second of a running answer and
nothing that was already complete. WAL mode keeps those frequent small commits cheap and lets a
second `localspec chat` read while one writes. The schema version lives in `PRAGMA
user_version`; `_MIGRATIONS[i]` upgrades version i to i + 1, and a database written by a newer
localspec is refused rather than guessed at. Ids are never reused (AUTOINCREMENT): a
conversation id given to `--conversation` or held by an open view must not come to name another.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from localspec import LocalspecError
from localspec.paths import data_dir, open_private, private_file, private_folder

Status = Literal["complete", "streaming", "cancelled", "interrupted"]
# a run of text from one target step: its length, its proposer, tokens taken from the draft
Span = tuple[int, str, int]

_MIGRATIONS = (
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        settings TEXT NOT NULL DEFAULT '{}',
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'complete',
        spans TEXT NOT NULL DEFAULT '[]',
        stats TEXT,
        created REAL NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    # files in context (tui/store_files.py): each conversation's set, and per user message the
    # version of each file it was sent with; contents are stored once per SHA-256, and one
    # that no message refers to any more is deleted with its last reference
    """
    CREATE TABLE context_files (
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        added REAL NOT NULL,
        PRIMARY KEY (conversation_id, path)
    );
    CREATE TABLE file_blobs (sha256 TEXT PRIMARY KEY, content TEXT NOT NULL);
    CREATE TABLE sent_files (
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL REFERENCES file_blobs(sha256),
        tokens INTEGER NOT NULL,
        PRIMARY KEY (message_id, path)
    );
    CREATE INDEX sent_files_by_path ON sent_files(path, message_id);
    CREATE TRIGGER file_blobs_unused AFTER DELETE ON sent_files
    WHEN NOT EXISTS (SELECT 1 FROM sent_files WHERE sha256 = OLD.sha256)
    BEGIN DELETE FROM file_blobs WHERE sha256 = OLD.sha256; END;
    """,
    # edits applied from answers (tui/store_edits.py), with each file's previous content so
    # that they can be undone; kept when their conversation is deleted (the files stay edited)
    """
    CREATE TABLE applied_edits (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER,
        message_id INTEGER,
        applied REAL NOT NULL,
        undone REAL
    );
    CREATE TABLE applied_files (
        edit_id INTEGER NOT NULL REFERENCES applied_edits(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        path TEXT NOT NULL,
        target TEXT NOT NULL,
        before TEXT,
        after TEXT,
        PRIMARY KEY (edit_id, position)
    );
    """,
)
SCHEMA_VERSION = len(_MIGRATIONS)
NEW_TITLE = "New conversation"


class StoreError(LocalspecError):
    """The conversation database cannot be used as it is."""


def default_path() -> Path:
    return data_dir() / "chat.sqlite3"


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    settings: str
    updated: float


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    status: Status
    spans: list[Span]
    stats: str | None


def _connect_private(path: Path, notice: Callable[[str], None] | None) -> sqlite3.Connection:
    """The database, in WAL mode, readable by the user alone, its pages checked.

    The history holds the user's code: the folder is 0700 (a wider existing one is tightened,
    with a `notice`), and the file is created 0600 before SQLite opens it; a link in its place
    is refused (its target's mode would be changed). SQLite gives the -wal and -shm files the
    database file's mode; they are checked too, since a database made by an older localspec
    may have had another mode. `PRAGMA quick_check` reads every page once (milliseconds for a
    chat history), so a damaged file is one error here instead of a failure mid-conversation.
    """
    private_folder(path.parent, notice)
    for suffix in ("", "-wal", "-shm"):
        private_file(path.with_name(path.name + suffix))
    try:
        os.close(open_private(path, append=True))
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        verdict = db.execute("PRAGMA quick_check(1)").fetchone()[0]
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(
            f"cannot open the conversation database {path} ({exc}): move the file away (or "
            f"delete it) to start with an empty history"
        ) from exc
    if verdict != "ok":
        db.close()
        raise StoreError(
            f"the conversation database {path} is damaged ({' '.join(verdict.split())}): move "
            f"it away (or delete it) to start with an empty history"
        )
    for suffix in ("-wal", "-shm"):
        private_file(path.with_name(path.name + suffix))
    return db


def _spans(text: str) -> list[Span]:
    """A message's saved spans; anything else in the column (a database edited by hand or
    damaged) is no spans: the message still shows, only uncoloured."""
    try:
        return [(int(n), str(s), int(d)) for n, s, d in json.loads(text)]
    except (ValueError, TypeError, RecursionError):
        return []


class ChatStore:
    """The conversation database; used from the UI thread only (sqlite3 objects are not shared
    between threads), workers hand their results to the UI first."""

    def __init__(
        self, path: Path | None = None, notice: Callable[[str], None] | None = None
    ) -> None:
        self.path = path or default_path()
        self._db = _connect_private(self.path, notice)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        # answers that were streaming when a previous run died stay, marked as such
        self._db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")

    def _migrate(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer localspec (schema {version}, this one "
                f"knows {SCHEMA_VERSION}): upgrade localspec or move the file away"
            )
        for target in range(version, SCHEMA_VERSION):
            # executescript commits first, so BEGIN makes each step atomic with its version
            self._db.executescript(
                f"BEGIN; {_MIGRATIONS[target]} PRAGMA user_version = {target + 1}; COMMIT;"
            )

    def close(self) -> None:
        self._db.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The connection, for the modules that own the later tables (`tui.store_files`)."""
        return self._db

    # -- conversations ------------------------------------------------------------------------
    def conversations(self) -> list[Conversation]:
        """All conversations, the most recently used first."""
        rows = self._db.execute(
            "SELECT id, title, settings, updated FROM conversations ORDER BY updated DESC, id DESC"
        )
        return [Conversation(r["id"], r["title"], r["settings"], r["updated"]) for r in rows]

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute(
            "SELECT id, title, settings, updated FROM conversations WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        return None if row is None else Conversation(row[0], row[1], row[2], row[3])

    def create(self, settings: str, title: str = NEW_TITLE) -> Conversation:
        now = time.time()
        cursor = self._db.execute(
            "INSERT INTO conversations (title, settings, created, updated) VALUES (?, ?, ?, ?)",
            (title, settings, now, now),
        )
        assert cursor.lastrowid is not None
        return Conversation(cursor.lastrowid, title, settings, now)

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute(
            "UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conversation_id)
        )

    def save_settings(self, conversation_id: int, settings: str) -> None:
        self._db.execute(
            "UPDATE conversations SET settings = ? WHERE id = ?", (settings, conversation_id)
        )

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self._db.execute(
            "UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id)
        )

    # -- messages -----------------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT id, role, content, status, spans, stats FROM messages "
            "WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        return [
            StoredMessage(
                r["id"],
                r["role"],
                r["content"],
                r["status"],
                _spans(r["spans"]),
                r["stats"],
            )
            for r in rows
        ]

    def add_message(
        self, conversation_id: int, role: str, content: str, status: Status = "complete"
    ) -> int:
        cursor = self._db.execute(
            "INSERT INTO messages (conversation_id, role, content, status, created) "
            "VALUES (?, ?, ?, ?, ?)",
            (conversation_id, role, content, status, time.time()),
        )
        self._touch(conversation_id)
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def update_message(
        self,
        message_id: int,
        content: str,
        status: Status,
        spans: list[Span],
        stats: str | None = None,
    ) -> None:
        self._db.execute(
            "UPDATE messages SET content = ?, status = ?, spans = ?, stats = ? WHERE id = ?",
            (content, status, json.dumps(spans), stats, message_id),
        )

    def delete_message(self, message_id: int) -> None:
        self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def export_markdown(self, conversation_id: int) -> str:
        """The conversation as a Markdown document: a heading per turn, answers verbatim."""
        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise StoreError(f"conversation {conversation_id} does not exist")
        parts = [f"# {conversation.title}\n"]
        for message in self.messages(conversation_id):
            note = "" if message.status == "complete" else f" ({message.status})"
            parts.append(f"## {message.role.capitalize()}{note}\n\n{message.content.strip()}\n")
        return "\n".join(parts)
