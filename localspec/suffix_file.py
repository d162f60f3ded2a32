"""The suffix store on disk: earlier requests' prompts and answers, per project and model.

Suffix drafts pay most on what comes back across sessions: the same files, tool results and
answers (`localspec.speculative.suffix`). `complete` runs one request per process and a
server restarts, so the store outlives them in the state folder, one file per project folder
and target model (token ids mean nothing under another tokenizer, and one project's code
has no business in another's drafts). It holds the user's code, so it is written 0600 in a
private folder, and `--no-suffix-store` keeps it in memory only.

The file is append-only: a header, then one record per text the store kept (a little-endian
uint32 count, then the tokens as uint32). Opening replays it through the store's own bound,
and rewrites it once it holds more than twice what the store keeps. A file that cannot be
read is set aside (renamed `.unreadable`, never deleted) with one line in the log, and the
store starts empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from localspec.paths import private_folder, state_dir
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
    return private_folder(state_dir() / "suffix") / f"{key}.bin"


def open_store(path: Path, store: SuffixStore) -> None:
    """Fill `store` from the file at `path` and append every text it keeps from now on; the
    file is rewritten to what the store keeps whenever it holds twice that."""
    texts = _read(path)
    for text in texts:
        store.add(text)
    in_file = sum(len(text) for text in texts)
    if in_file > COMPACT_FACTOR * store.max_tokens or not path.exists():
        _rewrite(path, store.texts)
        in_file = len(store)

    def kept(text: list[int]) -> None:
        nonlocal in_file
        in_file += len(text)
        if in_file > COMPACT_FACTOR * store.max_tokens:
            _rewrite(path, store.texts)
            in_file = len(store)
        else:
            _append(path, [text])

    store.on_store = kept


def _read(path: Path) -> list[list[int]]:
    """The texts in the file, oldest first; none (and the file set aside) if unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        _log.warning("suffix store %s cannot be read (%s): starting an empty one", path, exc)
        return []
    try:
        return _parse(data)
    except ValueError as exc:
        aside = path.with_suffix(".unreadable")
        path.replace(aside)
        _log.warning("suffix store %s is not one (%s): set aside as %s", path, exc, aside)
        return []


def _parse(data: bytes) -> list[list[int]]:
    if not data.startswith(MAGIC):
        raise ValueError("no header")
    words = data[len(MAGIC) :]
    if len(words) % 4:
        raise ValueError("cut short")
    values = np.frombuffer(words, dtype="<u4")
    texts, at = [], 0
    while at < len(values):
        count = int(values[at])
        if at + 1 + count > len(values):
            raise ValueError("a record runs past the end")
        texts.append(values[at + 1 : at + 1 + count].tolist())
        at += 1 + count
    return texts


def _records(texts: list[list[int]]) -> bytes:
    parts = []
    for text in texts:
        parts.append(np.asarray([len(text), *text], dtype="<u4").tobytes())
    return b"".join(parts)


def _append(path: Path, texts: list[list[int]]) -> None:
    """Append records (a store that cannot be written is logged, never fails an answer)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as file:
            file.write(_records(texts))
    except OSError as exc:
        _log.warning("suffix store %s cannot be written: %s", path, exc)


def _rewrite(path: Path, texts: list[list[int]]) -> None:
    """Replace the file with a header and `texts`, atomically."""
    temporary = path.with_suffix(".tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(temporary, flags, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(MAGIC + _records(texts))
        temporary.replace(path)
    except OSError as exc:
        _log.warning("suffix store %s cannot be written: %s", path, exc)
