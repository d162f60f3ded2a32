"""Reading and writing an edit's files without following links, and only plain files.

A change is planned against a path whose links were resolved and found under the working
folder (`apply.resolve`), and written later: in the chat, after the user has read the diff. A
folder on the way may have become a link to anywhere in between, so every access here walks
that resolved path from "/" one name at a time with O_NOFOLLOW, holding each folder open: a
link anywhere on the way is refused, and the file read or replaced is the one that was checked
(a rename replaces a name in the folder held open, so it never writes through a link or a hard
link). A file is checked with lstat before it is opened and with fstat after, opened with
O_NONBLOCK: a FIFO, a device or a socket is refused, never read, so none can block.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from localspec.errors import EditError

MAX_BYTES = 64 * 1024 * 1024  # the largest file an edit reads or writes
_TEMP_SUFFIX = ".localspec-tmp"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_PATH (Linux) walks folders the user may search but not list; elsewhere they are read
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a link",
}


def read_file(target: Path, name: str | None = None) -> bytes | None:
    """The bytes of the plain file `target` (absolute, links resolved); None when there is no
    such file (or a file stands where one of its folders would be). `EditError`, naming it
    `name` (by default its path), when it, or a folder on the way, is a link or not a plain
    file, or is over `MAX_BYTES`."""
    label = name or str(target)
    target = _absolute(target)
    if not target.name:  # "/" itself
        raise EditError([f"{label} is a folder: name a file"])
    try:
        folder = _open_folder(target.parent, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with _closing(folder):
        try:
            found = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None
        _check_plain(label, found)
        file = os.open(
            target.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC, dir_fd=folder
        )
    with _closing(file):
        opened = os.fstat(file)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
            raise EditError([f"{label} was replaced while it was read: try again"])
        _check_plain(label, opened)
        data = _read_all(file)
    if len(data) > MAX_BYTES:
        raise _too_big(label)
    return data


def write_file(target: Path, data: bytes) -> None:
    """Replace the file `target` with `data` through a temporary file and a rename, creating
    the folders it needs; an existing file's permission bits are kept, a new file is created
    0666 less the umask, as any program's would."""
    if len(data) > MAX_BYTES:
        raise _too_big(str(target))
    target = _absolute(target)
    with _closing(_open_folder(target.parent, create=True)) as folder:
        try:
            found = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
            mode: int | None = stat.S_IMODE(found.st_mode) if stat.S_ISREG(found.st_mode) else None
        except FileNotFoundError:
            mode = None
        # an existing file's mode is set on the temporary file before it takes the name
        descriptor, temporary = _create_temporary(
            folder, target.name, 0o666 if mode is None else 0o600
        )
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
                file.flush()
                if mode is not None:
                    os.fchmod(file.fileno(), mode)
                os.fsync(file.fileno())
            os.replace(temporary, target.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            raise
        _sync(folder)


def remove_file(target: Path) -> None:
    """Remove `target` (a name in its folder: a link is removed, never followed), if it is
    there."""
    target = _absolute(target)
    try:
        folder = _open_folder(target.parent, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return
    with _closing(folder):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target.name, dir_fd=folder)
        _sync(folder)


def _absolute(target: Path) -> Path:
    """`target` from "/": a relative path is taken from the working folder (the walk below
    starts at "/"); ".." is taken away by name, safe as no link on the way is followed."""
    return Path(os.path.abspath(target))


def _open_folder(folder: Path, create: bool) -> int:
    """`folder` (absolute) opened for reading, reached from "/" without following a link;
    with `create`, the folders missing on the way are made."""
    current = os.open("/", _WALK)
    try:
        for depth, name in enumerate(folder.parts[1:], 2):
            try:
                step = _step(current, name, create)
            except OSError as exc:
                _refuse_link(current, name, Path(*folder.parts[:depth]), exc)
                raise
            os.close(current)
            current = step
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=current)
    finally:
        os.close(current)


def _step(parent: int, name: str, create: bool) -> int:
    """The folder `name` in `parent`, opened without following a link (made first with
    `create` when it is missing)."""
    try:
        return os.open(name, _WALK, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made in the meantime: opened as any other
        os.mkdir(name, 0o777, dir_fd=parent)
    return os.open(name, _WALK, dir_fd=parent)


def _refuse_link(parent: int, name: str, where: Path, exc: OSError) -> None:
    """A step refused because `where` is a link: say so (any other failure stays as it is)."""
    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
        return
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise EditError(
            [
                f"{where} is a link now, not the folder it was when the edit was planned: "
                f"edits never go through links"
            ]
        ) from exc


def _check_plain(label: str, found: os.stat_result) -> None:
    if stat.S_ISDIR(found.st_mode):
        raise EditError([f"{label} is a folder: name a file"])
    if not stat.S_ISREG(found.st_mode):
        kind = _KINDS.get(stat.S_IFMT(found.st_mode), "not a plain file")
        raise EditError([f"{label} is {kind}, not a plain file: edits only go to plain files"])
    if found.st_size > MAX_BYTES:
        raise _too_big(label)


def limit() -> str:
    """`MAX_BYTES` as a message says it."""
    if MAX_BYTES % (1 << 20):
        return f"{MAX_BYTES} bytes"
    return f"{MAX_BYTES >> 20} MiB"


def _too_big(label: str) -> EditError:
    return EditError([f"{label} is over {limit()}: edit it by hand"])


def _read_all(file: int) -> bytes:
    chunks = []
    size = 0
    while size <= MAX_BYTES:
        chunk = os.read(file, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _create_temporary(folder: int, name: str, mode: int) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    while True:
        # the name's start only: a 255-byte name must leave room for the rest
        temporary = f".{name[:48]}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        try:
            return os.open(temporary, flags, mode, dir_fd=folder), temporary
        except FileExistsError:  # another writer's name, however unlikely: draw again
            continue


def _sync(folder: int) -> None:
    """Make the rename itself durable (a crash right after must not bring the old file back)."""
    os.fsync(folder)


@contextlib.contextmanager
def _closing(descriptor: int) -> Iterator[int]:
    try:
        yield descriptor
    finally:
        os.close(descriptor)
