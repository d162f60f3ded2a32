"""The suffix store on disk: earlier requests' prompts and answers, per project and model.

Suffix drafts pay most on what comes back across sessions: the same files, tool results and
answers (`localspec.speculative.suffix`). `complete` runs one request per process and a
server restarts, so the store outlives them in the state folder, one file per project folder
and target model (token ids mean nothing under another tokenizer, and one project's code
has no business in another's drafts). It holds the user's code, so it is written 0600 in a
private folder, and `--no-suffix-store` keeps it in memory only.

The file is append-only: a header, then one record per text the store kept (a little-endian
uint32 count, then the tokens as uint32). Opening replays it through the store's own bound,
and rewrites it once it holds more than twice what the store keeps. Processes in one folder
share the file (appends take a lock; a rewrite keeps the writer's store, so texts another
process appended meanwhile may go: it is a cache). A record cut short by an interrupted write
is dropped; a file that is not a store is set aside (renamed `*.unreadable`, never deleted)
with one line in the log, and the store starts empty.

Nothing read is trusted: a record holding a token id outside the model's vocabulary (a
damaged file, one written by hand) would reach llama.cpp as a draft and fail every request
its prompt matches, so such records are dropped (one line in the log) and the file rewritten
without them; at most what the bound lets the file hold is read; and a path that is not a
regular file of the user's (a FIFO would block the read for ever) leaves the store in memory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import stat
import time
from pathlib import Path

import numpy as np

from localspec.errors import LocalspecError
from localspec.paths import private_folder, state_dir, write_private
from localspec.speculative.suffix import SuffixStore

_log = logging.getLogger(__name__)

MAGIC = b"localspec-suffix-store 1\n"
COMPACT_FACTOR = 2


def default_store_path(target: Path, project: Path | None = None) -> Path:
    """The store of this target model in this project folder (default: the working folder).
    A model file that is not there (yet) is named by its path: loading it says what is wrong."""
    folder = (project or Path.cwd()).resolve()
    model = target.resolve()
    try:
        size: int | None = model.stat().st_size
    except OSError:
        size = None
    identity = {"model": str(model), "size": size, "project": str(folder)}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    return private_folder(private_folder(state_dir()) / "suffix") / f"{key}.bin"


def open_store(path: Path, store: SuffixStore, *, n_vocab: int) -> None:
    """Fill `store` from the file at `path` and append every text it keeps from now on; the
    file is rewritten to what the store keeps whenever it holds twice that. A file that
    cannot be read or written costs the store its file, never the command: one line in the
    log, and the store lives in memory. Records with a token id that is not below `n_vocab`
    (the model's vocabulary) are dropped."""
    try:
        texts = _read(path, _limit_bytes(store))
    except OSError as exc:
        _log.warning("suffix store %s cannot be read (%s): kept in memory only", path, exc)
        return
    valid = [text for text in texts if not text or max(text) < n_vocab]
    if len(valid) < len(texts):
        _log.warning(
            "suffix store %s: %d records with token ids outside the model's vocabulary of %d "
            "dropped",
            path,
            len(texts) - len(valid),
            n_vocab,
        )
    for text in valid:
        store.add(text)
    in_file = sum(len(text) for text in texts)
    stale = len(valid) < len(texts) or in_file > COMPACT_FACTOR * store.max_tokens
    if stale or not path.exists():
        _rewrite(path, store.texts)
        in_file = len(store)

    def kept(text: list[int]) -> None:
        nonlocal in_file
        in_file += len(text)
        if in_file > COMPACT_FACTOR * store.max_tokens or not _append(path, text):
            _rewrite(path, store.texts)
            in_file = len(store)

    store.on_store = kept


def _limit_bytes(store: SuffixStore) -> int:
    """The most of a file that is read: the file is rewritten once it holds twice what the
    store keeps, so beyond twice that again (record headers included) it is not one of ours
    and its rest would be dropped by that rewrite anyway."""
    return len(MAGIC) + 4 * 2 * (COMPACT_FACTOR * store.max_tokens + 1)


def _read(path: Path, limit: int) -> list[list[int]]:
    """The texts in the first `limit` bytes of the file, oldest first. A record cut short at
    the end (a write that was interrupted) is dropped from the file; a file that is not a
    store is set aside; a path that is not a regular file of the user's is an OSError."""
    try:
        fd = _open_ours(path, os.O_RDWR)
    except FileNotFoundError:
        return []
    with os.fdopen(fd, "r+b") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        data = file.read(limit)
        if not data.startswith(MAGIC):
            aside = path.with_name(f"{path.stem}.{time.time_ns()}.unreadable")
            path.replace(aside)
            _log.warning("suffix store %s is not one: set aside as %s", path, aside)
            return []
        texts, whole = _parse(data[len(MAGIC) :])
        if len(MAGIC) + whole < len(data):
            file.truncate(len(MAGIC) + whole)
            _log.warning("suffix store %s: an interrupted write at its end dropped", path)
        return texts


def _open_ours(path: Path, flags: int) -> int:
    """`path` opened with `flags`, never through a link and never blocking on a FIFO; an
    OSError unless it is a regular file of the user's with no other name."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
        os.close(fd)
        raise OSError(f"{path} is not a regular file of yours")
    os.set_blocking(fd, True)
    return fd


def _parse(data: bytes) -> tuple[list[list[int]], int]:
    """The whole records in `data` and the bytes they take."""
    values = np.frombuffer(data[: len(data) - len(data) % 4], dtype="<u4")
    texts, at = [], 0
    while at < len(values):
        count = int(values[at])
        if at + 1 + count > len(values):
            break
        texts.append(values[at + 1 : at + 1 + count].tolist())
        at += 1 + count
    return texts, 4 * at


def _record(text: list[int]) -> bytes:
    return np.asarray([len(text), *text], dtype="<u4").tobytes()


def _append(path: Path, text: list[int]) -> bool:
    """Append one record; False where the file is gone (another process set it aside, the
    user removed it): the caller writes it whole again. A file that cannot be written is
    logged, never fails an answer."""
    try:
        fd = _open_ours(path, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        return False
    except OSError as exc:
        _log.warning("suffix store %s cannot be written: %s", path, exc)
        return True
    with os.fdopen(fd, "ab") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(_record(text))
    return True


def _rewrite(path: Path, texts: list[list[int]]) -> None:
    """Replace the file with a header and `texts`, atomically (`write_private`: a temporary
    file of this process's, 0600, renamed over it)."""
    try:
        write_private(path, MAGIC + b"".join(_record(text) for text in texts))
    except (OSError, LocalspecError) as exc:
        _log.warning("suffix store %s cannot be written: %s", path, exc)
