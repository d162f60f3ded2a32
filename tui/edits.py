"""Reviewing, applying and undoing an answer's edits in the chat app.

The last answer's edits (`localspec.edits`: SEARCH/REPLACE blocks, and whole-file blocks for
the conversation's added files) are planned against the files as they are now, shown in the
diff view, and written only once the user applies them there; what a lenient reading of a
block assumed (`localspec.edits.lenient`) is shown there too. A SEARCH that does not match is
reported block by block and nothing is written. A file that changed on disk since it was last
sent to the model is written only after a second question: the model edited a version the
user has since changed. What each file held before is kept in the store (`tui.store_edits`),
so that the latest edit can be undone, again only after a question if the file changed since.

Paths are relative to the working folder, as the model is shown its files (`tui.files`).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from localspec.edits import (
    EditError,
    FileChange,
    current_text,
    parse_edits,
    plan_changes,
    write_changes,
)
from tui import store_files
from tui.screens.conversations import ConversationScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.diff import DiffScreen
from tui.store_edits import last_edit, mark_undone, record_edit
from tui.widgets.message import MessageView

REVIEW_KEY, UNDO_KEY = "f6", "f7"


def added_files(screen: ConversationScreen, root: Path) -> list[str]:
    """The conversation's added files as the model saw them: paths under `root`."""
    return screen.edit_context(root)


def offer_edits(screen: ConversationScreen, answer: str) -> None:
    """Once an answer is whole and holds edits: say what F6 will do with it, planned against
    the files as they are now (nothing is written)."""
    root = Path.cwd().resolve()
    added = added_files(screen, root)
    try:
        edits = parse_edits(answer, added)
        changes = plan_changes(edits, root, added) if edits else []
    except EditError as exc:
        screen.notify(
            f"{exc}\n{REVIEW_KEY} has nothing to apply: ask the model again",
            title="edits in the answer",
            severity="warning",
            timeout=10,
        )
        return
    if edits:
        screen.notify(_offer(changes), title="edits", timeout=10)


def _offer(changes: Sequence[FileChange]) -> str:
    """What F6 will do with planned changes, in one notice."""
    if not changes:
        return f"the answer's edits leave every file as it is: {REVIEW_KEY} has nothing to apply"
    names = ", ".join(change.path for change in changes)
    assumed = any(change.assumed for change in changes)
    read = " (read leniently: the diff view says what was assumed)" if assumed else ""
    return (
        f"the answer edits {names}{read}: {REVIEW_KEY} shows the diff, where a applies it and "
        f"d discards it"
    )


def review_edits(screen: ConversationScreen) -> None:
    """Plan the last answer's edits and show them in the diff view."""
    answers = screen.messages_view.query(MessageView).filter(".assistant")
    view = answers.last() if answers else None
    if view is None or view.status == "streaming":
        screen.notify("there is no finished answer to take edits from", severity="warning")
        return
    root = Path.cwd().resolve()
    added = added_files(screen, root)
    try:
        edits = parse_edits(view.content, added)
        changes = plan_changes(edits, root, added)
    except EditError as exc:
        screen.notify(
            f"{exc}\nNothing was written.", title="edits not applied", severity="error", timeout=20
        )
        return
    if not edits:
        screen.notify(
            "the last answer has no edits: SEARCH/REPLACE blocks, or a whole-file block for an "
            "added file",
            severity="warning",
        )
        return
    if not changes:
        screen.notify("the edits leave every file as it is: nothing to apply")
        return
    stale = changed_since_sent(screen, changes)
    source = (screen.conversation_id, view.message_id)

    def decided(apply: bool | None) -> None:
        if not apply:
            screen.notify("edits discarded: nothing was written")
        elif stale:
            question = (
                f"{', '.join(stale)} changed on disk since it was sent to the model: the edit "
                f"was made for the old version. Write it anyway?"
            )
            _ask(screen, question, lambda: _apply(screen, changes, source), "nothing was written")
        else:
            _apply(screen, changes, source)

    screen.app.push_screen(DiffScreen(changes, stale), decided)


def changed_since_sent(screen: ConversationScreen, changes: Sequence[FileChange]) -> list[str]:
    """The files whose content now is not the version last sent to the model (files never
    sent, or created by the edit, have nothing to differ from)."""
    if screen.conversation_id is None:
        return []
    stale = []
    for change in changes:
        sent = store_files.last_sent(screen.store, screen.conversation_id, change.target)
        if sent is None or change.before is None:
            continue
        if hashlib.sha256(change.before.encode()).hexdigest() != sent[0]:
            stale.append(change.path)
    return stale


def _ask(screen: ConversationScreen, question: str, then: Callable[[], None], no: str) -> None:
    def answered(yes: bool | None) -> None:
        if yes:
            then()
        else:
            screen.notify(no, severity="warning")

    screen.app.push_screen(ConfirmScreen(question), answered)


def _apply(
    screen: ConversationScreen, changes: Sequence[FileChange], source: tuple[int | None, ...]
) -> None:
    names = ", ".join(change.path for change in changes)
    try:
        write_changes(changes)
    except EditError as exc:
        screen.notify(str(exc), title="edits not applied", severity="error", timeout=20)
        return
    try:
        record_edit(screen.store, source[0], source[1], changes)
    except sqlite3.Error as exc:  # the files are written; only the way back is missing
        screen.notify(
            f"applied to {names}, but it cannot be undone from here: the database refused it "
            f"({exc})",
            severity="warning",
            timeout=10,
        )
        return
    screen.notify(f"applied the edits to {names} ({UNDO_KEY} undoes them)", title="edits")


def undo_edit(screen: ConversationScreen) -> None:
    """Put back what the latest applied edit replaced (a file it created is removed)."""
    edit = last_edit(screen.store)
    if edit is None:
        screen.notify("there is no applied edit to undo", severity="warning")
        return
    try:
        now = [current_text(change.target) for change in edit.files]
    except EditError as exc:  # a file became a link, a FIFO...: nothing is touched
        screen.notify(f"{exc}; nothing was written", title="not undone", severity="error")
        return
    back = [
        FileChange(c.path, c.target, text, c.before)
        for c, text in zip(edit.files, now, strict=True)
    ]
    changed = [c.path for c, text in zip(edit.files, now, strict=True) if text != c.after]
    names = ", ".join(change.path for change in edit.files)

    def restore() -> None:
        try:
            write_changes(back)
        except EditError as exc:
            screen.notify(str(exc), title="not undone", severity="error", timeout=20)
            return
        mark_undone(screen.store, edit.id)
        screen.notify(f"undid the edit of {names}", title="edits")

    if not changed:
        restore()
        return
    question = (
        f"{', '.join(changed)} changed since the edit was applied: undo anyway, losing those "
        f"changes?"
    )
    refused = f"undo refused: {', '.join(changed)} changed since the edit; nothing was written"
    _ask(screen, question, restore, refused)
