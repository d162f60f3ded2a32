"""Edits applied from answers, kept in the chat database so that the app can undo them.

One applied edit is one row of `applied_edits` (an "apply" in the diff view, however many files
it changed) with a row of `applied_files` per file: its content before (NULL: the file did not
exist) and after. Undo takes the latest edit not undone yet, whichever conversation it came
from: files on disk do not belong to a conversation. Used from the UI thread, like the store.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from localspec.edits import FileChange
from tui.store import ChatStore


@dataclass(frozen=True)
class AppliedEdit:
    """An applied edit: where it came from and each file's change as it was written."""

    id: int
    conversation_id: int | None
    message_id: int | None
    applied: float
    files: list[FileChange]


def record_edit(
    store: ChatStore,
    conversation_id: int | None,
    message_id: int | None,
    changes: Sequence[FileChange],
) -> int:
    """Keep `changes`, just written, for undo; its id."""
    db = store.db
    db.execute("BEGIN")
    try:
        cursor = db.execute(
            "INSERT INTO applied_edits (conversation_id, message_id, applied) VALUES (?, ?, ?)",
            (conversation_id, message_id, time.time()),
        )
        edit_id = cursor.lastrowid
        assert edit_id is not None
        db.executemany(
            "INSERT INTO applied_files (edit_id, position, path, target, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (edit_id, position, c.path, str(c.target), c.before, c.after)
                for position, c in enumerate(changes)
            ],
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return edit_id


def last_edit(store: ChatStore) -> AppliedEdit | None:
    """The latest applied edit that was not undone, or None."""
    row = store.db.execute(
        "SELECT id, conversation_id, message_id, applied FROM applied_edits "
        "WHERE undone IS NULL ORDER BY id DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    files = store.db.execute(
        "SELECT path, target, before, after FROM applied_files WHERE edit_id = ? ORDER BY position",
        (row[0],),
    )
    changes = [FileChange(f[0], Path(f[1]), f[2], f[3]) for f in files]
    return AppliedEdit(row[0], row[1], row[2], row[3], changes)


def mark_undone(store: ChatStore, edit_id: int) -> None:
    store.db.execute("UPDATE applied_edits SET undone = ? WHERE id = ?", (time.time(), edit_id))
