"""Writing planned changes to disk: atomically per file, all files or none.

Each file is written to a temporary file in its own folder, flushed to disk and renamed over
the old one, so a reader (an editor, a build, a crash) sees the old file or the new one, never
half of either. The replaced file's permission bits are kept; a new file gets 0666 less the
umask, as any program's would. Before anything is written, every file is checked to still hold
what the change was planned against: a file edited in the meantime is not overwritten. When a
write fails half way, the files already written are put back. Every read and write goes through
`fs`, which follows no link: a folder swapped for a link since the plan is refused, not written
through.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from localspec.edits import fs
from localspec.edits.apply import FileChange
from localspec.errors import EditError

_log = logging.getLogger(__name__)


def current_text(target: Path) -> str | None:
    """The file's text now (None: it does not exist); bytes that are not UTF-8 are kept as
    surrogates, so that any change to the file shows in a comparison. `EditError` when it is
    not a plain file, or is reached through a link."""
    try:
        data = fs.read_file(target)
    except OSError as exc:  # a race with a link, a folder the user may not read, a disk error
        raise EditError([f"cannot read {target}: {exc.strerror or exc}"]) from exc
    return None if data is None else data.decode("utf-8", errors="surrogateescape")


def changed_since(changes: Sequence[FileChange]) -> list[str]:
    """The changes whose file no longer holds what the change was planned against."""
    return [change.path for change in changes if current_text(change.target) != change.before]


def write_changes(changes: Sequence[FileChange]) -> None:
    """Write every change, or none: `EditError` when a file changed since the changes were
    planned, or when one cannot be written (those already written are restored)."""
    try:
        stale = changed_since(changes)
    except EditError as exc:
        raise EditError([f"{problem}; nothing was written" for problem in exc.problems]) from exc
    if stale:
        raise EditError(
            [
                f"{path} changed on disk since the diff was made: nothing was written; review "
                f"the edits again"
                for path in stale
            ]
        )
    written: list[FileChange] = []
    for change in changes:
        try:
            _put(change.target, change.after)
        except (OSError, EditError) as exc:
            _restore(written)
            why = (exc.strerror or exc) if isinstance(exc, OSError) else exc
            raise EditError([f"cannot write {change.path}: {why}; no file was changed"]) from exc
        written.append(change)


def _restore(written: Sequence[FileChange]) -> None:
    for change in reversed(written):
        try:
            _put(change.target, change.before)
        except (OSError, EditError):  # the disk refuses now: in the log, the user sees the error
            _log.exception("could not restore %s after a failed edit", change.target)


def _put(target: Path, text: str | None) -> None:
    if text is None:
        fs.remove_file(target)
    else:
        atomic_write(target, text)


def atomic_write(target: Path, text: str) -> None:
    """Replace `target` (absolute, links resolved) with `text` (UTF-8) through a temporary file
    and a rename; surrogates are bytes that were not UTF-8 when read (`current_text`), written
    back as they were."""
    fs.write_file(target, text.encode("utf-8", errors="surrogateescape"))
