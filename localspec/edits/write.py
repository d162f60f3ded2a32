"""Writing planned changes to disk: atomically per file, all files or none.

Each file is written to a temporary file in its own folder, flushed to disk and renamed over
the old one, so a reader (an editor, a build, a crash) sees the old file or the new one, never
half of either. The replaced file's permission bits are kept; a new file gets 0666 less the
umask, as any program's would. Before anything is written, every file is checked to still hold
what the change was planned against: a file edited in the meantime is not overwritten. When a
write fails half way, the files already written are put back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from localspec.edits.apply import FileChange
from localspec.errors import EditError

_TEMP_SUFFIX = ".localspec-tmp"
_log = logging.getLogger(__name__)


def current_text(target: Path) -> str | None:
    """The file's text now (None: it does not exist); bytes that are not UTF-8 are kept as
    surrogates, so that any change to the file shows in a comparison."""
    try:
        return target.read_bytes().decode("utf-8", errors="surrogateescape")
    except (FileNotFoundError, NotADirectoryError):  # a file in its place: no such file
        return None


def changed_since(changes: Sequence[FileChange]) -> list[str]:
    """The changes whose file no longer holds what the change was planned against."""
    return [change.path for change in changes if current_text(change.target) != change.before]


def write_changes(changes: Sequence[FileChange]) -> None:
    """Write every change, or none: `EditError` when a file changed since the changes were
    planned, or when one cannot be written (those already written are restored)."""
    stale = changed_since(changes)
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
        except OSError as exc:
            _restore(written)
            raise EditError(
                [f"cannot write {change.path}: {exc.strerror or exc}; no file was changed"]
            ) from exc
        written.append(change)


def _restore(written: Sequence[FileChange]) -> None:
    for change in reversed(written):
        try:
            _put(change.target, change.before)
        except OSError:  # the disk refuses now: say so in the log, the user sees the error
            _log.exception("could not restore %s after a failed edit", change.target)


def _put(target: Path, text: str | None) -> None:
    if text is None:
        target.unlink(missing_ok=True)
        _sync_folder(target.parent)
    else:
        atomic_write(target, text)


def atomic_write(target: Path, text: str) -> None:
    """Replace `target` with `text` (UTF-8) through a temporary file and a rename."""
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
        target.parent.mkdir(parents=True, exist_ok=True)
    # a new file is created 0666 and the umask applies, as for any program; an existing
    # file's mode is set on the temporary file before it becomes visible under the name
    descriptor, temporary = _create_temporary(target, 0o600 if mode is not None else 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            # surrogates are bytes that were not UTF-8 when read (`current_text`): kept as such
            file.write(text.encode("utf-8", errors="surrogateescape"))
            file.flush()
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)


def _create_temporary(target: Path, mode: int) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")
        try:
            return os.open(temporary, flags, mode), temporary
        except FileExistsError:  # another writer's name, however unlikely: draw again
            continue


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (a crash right after must not bring the old file back)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
