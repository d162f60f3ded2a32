"""Where localspec keeps per-user files that several surfaces need to agree on.

Only platformdirs is imported here, so a command that just needs to find a running server
(`complete`) does not load the server stack to learn where its socket is.

The runtime folder is chosen here rather than by `platformdirs.user_runtime_path`: without a
usable `XDG_RUNTIME_DIR` (a fresh container, cron, ssh without a login session) platformdirs
warns on stderr at every call, and a command's stderr belongs to the user.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import platformdirs

from localspec.errors import LocalspecError

_PRIVATE = 0o700
_PRIVATE_FILE = 0o600


class RuntimeFolderError(LocalspecError):
    """The runtime folder exists but is not a private folder of this user."""


class PrivatePathError(LocalspecError):
    """A file or folder localspec keeps private is a symbolic link to something that is not
    private, or cannot be created: its mode is never changed through the link."""


def runtime_dir() -> Path:
    """localspec's private folder for its socket: `$XDG_RUNTIME_DIR/localspec` when that
    variable names a folder the user owns with mode 0700 (what the XDG spec promises), else
    `localspec-<uid>` in the temporary folder, created 0700 and checked to be the user's own."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(base) and _problem(Path(base)) is None:
        return Path(base) / "localspec"
    return claim_runtime_dir(Path(tempfile.gettempdir()) / f"localspec-{os.getuid()}")


def _problem(folder: Path) -> str | None:
    """Why `folder` is not a private folder of this user (None when it is)."""
    try:
        info = folder.lstat()
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.getuid():
        return f"it belongs to uid {info.st_uid}"
    if info.st_mode & 0o077:
        return f"its mode is {stat.S_IMODE(info.st_mode):o}, not 700"
    return None


def claim_runtime_dir(folder: Path) -> Path:
    """`folder`, created 0700 if missing; an existing one must be the user's own folder, not a
    link (the server claims its runtime folder with this before putting its socket there).

    The fallback name is predictable, so another user could create it first to receive the prompts
    sent to "our" socket: a folder that is a link or belongs to someone else is refused.
    """
    try:
        folder.mkdir(mode=_PRIVATE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RuntimeFolderError(
            f"cannot create the runtime folder {folder} ({exc.strerror or exc}): set "
            f"XDG_RUNTIME_DIR to a private folder of yours"
        ) from exc
    problem = _problem(folder)
    writable_by_others = folder.lstat().st_mode & 0o022 if problem is not None else 0
    if problem is not None and problem.startswith("its mode") and not writable_by_others:
        # our own folder, readable by others (made by hand): nobody else can have put a
        # socket in it, so making it private is enough
        _set_mode(folder, _PRIVATE)
        problem = _problem(folder)
    if problem is not None:
        raise RuntimeFolderError(
            f"the runtime folder {folder} is not a private folder of yours ({problem}): "
            f"remove it, or set XDG_RUNTIME_DIR to a private folder of yours"
        )
    return folder


def default_socket_path() -> Path:
    """The server's Unix socket, in the private runtime folder (see `runtime_dir`)."""
    return runtime_dir() / "localspec.sock"


def token_path() -> Path:
    """The bearer token TCP clients send (0600)."""
    return platformdirs.user_config_path("localspec") / "server-token"


def state_dir() -> Path:
    """localspec's per-user state: the last error's traceback, notices already shown."""
    return platformdirs.user_state_path("localspec")


def error_log_path() -> Path:
    """Where the CLI writes the traceback of an unexpected error (a bug) for a bug report."""
    return state_dir() / "last-error.log"


def data_dir() -> Path:
    """localspec's per-user data (conversations, what the tuner learned): private, 0700."""
    return platformdirs.user_data_path("localspec")


def cache_dir() -> Path:
    """localspec's per-user cache (calibrations, hashes of verified models): private, 0700."""
    return platformdirs.user_cache_path("localspec")


def private_folder(folder: Path, notice: Callable[[str], None] | None = None) -> Path:
    """`folder`, created 0700 (with its missing parents) when absent.

    The chat history holds the user's code, so localspec's own folders are the user's alone.
    An existing folder that others may read or enter is tightened to 0700, and `notice` (when
    given) is told so in one line: the user learns that earlier files were readable. Missing
    parents are created 0700 as well (what the XDG spec asks of `~/.local/state` and the
    like), never the umask's 0755. A link
    (data kept on another disk) is accepted when it leads to a private folder of the user's,
    and refused otherwise: changing a mode through a link would change the folder it points to.
    """
    try:
        _make_folders(folder)
    except OSError as exc:
        raise PrivatePathError(
            f"cannot create the folder {folder} ({exc.strerror or exc}): remove what is there "
            f"or make its parent writable"
        ) from exc
    if folder.is_symlink():
        target = folder.resolve()
        problem = _problem(target)
        if problem is not None:
            raise PrivatePathError(
                f"{folder} is a symbolic link to {target}, which is not a private folder of "
                f"yours ({problem}): run `chmod 700 {target}` or replace the link with a folder"
            )
        return folder
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PrivatePathError(
            f"cannot create the folder {folder} (a file is in its place): move that file away"
        )
    if info.st_uid != os.getuid():
        raise PrivatePathError(
            f"{folder} belongs to uid {info.st_uid}, not to you: localspec keeps its files in "
            f"folders of yours; remove it or point the XDG folders elsewhere"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        _set_mode(folder, _PRIVATE)
        if notice is not None:
            notice(f"made {folder} private (its mode was {mode:o}, now 700)")
    return folder


def _make_folders(folder: Path) -> None:
    """mkdir -p with every folder it creates 0700 (`Path.mkdir(parents=True)` gives the
    parents the umask's mode)."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for created in reversed(missing):
        # made meanwhile by another process: the caller checks what is there
        with contextlib.suppress(FileExistsError):
            created.mkdir(mode=_PRIVATE)


def private_file(path: Path) -> None:
    """Make an existing file the user's alone (0600); a missing one is left missing.

    A link is refused rather than followed: its target could be any file of the user's.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise PrivatePathError(
            f"{path} is a symbolic link: localspec keeps this file private and does not change "
            f"the mode of the file a link points to; move the file itself to {path}"
        )
    if stat.S_IMODE(info.st_mode) != _PRIVATE_FILE:
        _set_mode(path, _PRIVATE_FILE)


def _set_mode(path: Path, mode: int) -> None:
    """chmod `path` itself: opened without following a link (a link raises ELOOP), changed
    through the descriptor, so a link swapped in after a check cannot redirect the change."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)


def open_private(path: Path, *, append: bool = False, shown: Path | None = None) -> int:
    """A descriptor writing `path`, a regular file of this user's, 0600: every file localspec
    writes is opened here (directly, or through `write_private`).

    A symbolic link is refused, not followed (its target could be any file of the user's), and
    so are a FIFO or device (writing one blocks until someone reads it, or fails at each
    write: neither is a file to keep), a file with other hard links (its other names could be
    anyone's) and another user's file. An existing file is made 0600 and, unless `append`,
    emptied: both only after those checks, through the descriptor, so nothing swapped in
    after a check is changed. The caller owns the descriptor (`os.fdopen` it). Errors name
    `shown` (default `path`): the file the user knows of, not a temporary one.
    """
    shown = shown or path
    _refuse_odd(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags | (os.O_APPEND if append else 0), _PRIVATE_FILE)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or exc
        raise PrivatePathError(
            f"cannot write {shown} ({reason}): give localspec the path of a regular file in a "
            f"folder you can write"
        ) from exc
    try:
        info = os.fstat(descriptor)
        problem = _file_problem(info)
        if problem is not None:
            raise PrivatePathError(_odd_file(shown, problem))
        if stat.S_IMODE(info.st_mode) != _PRIVATE_FILE:
            os.fchmod(descriptor, _PRIVATE_FILE)
        if not append:
            os.ftruncate(descriptor, 0)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _refuse_odd(path: Path) -> None:
    """Refuse what is at `path` before opening it (opening a FIFO for writing would wait for
    a reader); `open_private` checks the opened file again."""
    try:
        info = path.lstat()
    except OSError:
        return  # missing (created by the open) or unreadable (the open says why)
    problem = "it is a symbolic link" if stat.S_ISLNK(info.st_mode) else _file_problem(info)
    if problem is not None:
        raise PrivatePathError(_odd_file(path, problem))


def _file_problem(info: os.stat_result) -> str | None:
    """Why the file `info` describes is not one localspec may write (None when it may)."""
    if stat.S_ISDIR(info.st_mode):
        return "it is a folder"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file (a FIFO, socket or device)"
    if info.st_uid != os.getuid():
        return f"it belongs to uid {info.st_uid}"
    if info.st_nlink > 1:
        return f"it has {info.st_nlink} hard links"
    return None


def _odd_file(path: Path, problem: str) -> str:
    return (
        f"{path} is not a file localspec writes ({problem}): localspec writes only regular "
        f"files of yours, never through a link; remove it or give another path"
    )


STATE_LIMIT = 16 * 2**20
"""The most of one of localspec's own state files that is read: more is not one it wrote."""


def read_private(path: Path, limit: int = STATE_LIMIT) -> bytes:
    """The bytes of one of localspec's own files, at most `limit`: a link is not followed, a
    FIFO or device is not read (opening a FIFO waits for a writer, `/dev/zero` never ends),
    and a longer file is refused. Each is an OSError, as a missing file is
    (FileNotFoundError): the caller treats them all as a file it cannot use."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"{path} is larger than {limit} bytes")
    return data


def read_private_json(path: Path, limit: int = STATE_LIMIT) -> object:
    """`read_private`'s bytes as JSON; ValueError when they are not JSON, nested too deeply
    for the parser included (it raises RecursionError)."""
    data = read_private(path, limit)
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError(f"{path} is nested too deeply") from exc


def write_private(path: Path, content: str | bytes, *, own_folder: bool = True) -> None:
    """Write `content` to `path` atomically, 0600 from its first byte.

    The temporary file is created 0600 by `open_private` (not chmod-ed afterwards), so there
    is no moment at which another user could open it; `os.replace` makes the write
    all-or-nothing and replaces a link at `path` rather than writing through it. With
    `own_folder` the folder is one of localspec's and made private (`private_folder`);
    without, it is the user's choice (an output file) and left as it is.
    """
    if own_folder:
        private_folder(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)  # a leftover, or a link planted at the name
    descriptor = open_private(temporary, shown=path)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content.encode() if isinstance(content, str) else content)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
