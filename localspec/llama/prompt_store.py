"""KV states of long prompts kept on disk, so that a restarted server does not process them again.

A coding agent's every request starts with the same long prefix: Claude Code's system prompt
and tools are ~18,600 tokens, opencode's ~8,000, and on a CPU processing them takes minutes.
The host-memory prompt cache (`localspec.llama.prompt_cache`) spares that within one server
process; this store spares it across processes, as llama-server's `--slot-save-path` does
when a client asks. After a prompt of at least `min_tokens` is processed, the context hands
its state here (`localspec.llama.prefill`); a later prompt that shares more with a stored state than
the cache offers restores it instead of processing those tokens again.

Each state is one file, 0600 in a 0700 folder keyed by the model file's content (its SHA-256,
`localspec.model_digest`), the settings that shape a state and llama.cpp's version
(`store_folder`): its tokens, a SHA-256 of them and the state, and the bytes of llama.cpp's
sequence state, written to a temporary file and renamed, so a crash never leaves half a state
under a real name. Everything read back is checked before it is used: the token count
against the file's size (before anything is allocated for it), the checksum before a state is
restored (a flipped bit is refused, not restored); what fails is deleted with one line in the
log, and what is not a file of ours (a folder, a link, another user's file) is passed over.
A stored state that a new one extends is deleted; beyond `limit_bytes` the least recently
used go first. This module only reads and writes files: taking and restoring a state is
`LlamaContext`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import BinaryIO

import numpy as np

from localspec.llama.prompt_cache import SavedState, Tokens, common_prefix
from localspec.paths import open_private, private_folder

_log = logging.getLogger(__name__)

MAGIC = b"localspec-kv 2\n"  # 2: a checksum after the count
_HEADER = len(MAGIC) + 8 + 32  # the magic, the token count, the SHA-256 of tokens and state
SUFFIX = ".kv"
DEFAULT_MIN_TOKENS = 1024
"""A prompt shorter than this takes seconds to process: not worth a file of its state."""


@dataclass
class _Entry:
    path: Path
    tokens: Tokens
    size: int
    used: float


def store_folder(
    base: Path, model_sha256: str, flash_attn: bool | None, value_cache: str = "f16"
) -> Path:
    """The folder for states of one model and setting: a state restores only into a context
    whose model (the file's content: another file at the same path, of the same size and
    time, is another model), KV layout (flash attention transposes the values or not; the
    values' type) and llama.cpp are the ones that wrote it."""
    identity: Mapping[str, object] = {
        "model_sha256": model_sha256,
        "flash_attn": flash_attn,
        "value_cache": value_cache,
        "llama_cpp": version("llama-cpp-python"),
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    return base / key


class PromptStore:
    """Stored prompt states, at most `limit_bytes` of files in `folder`."""

    def __init__(self, folder: Path, limit_bytes: int, min_tokens: int = DEFAULT_MIN_TOKENS):
        self.folder = folder
        self.limit_bytes = limit_bytes
        self.min_tokens = max(1, min_tokens)
        private_folder(folder)
        listed = (_read_entry(path, limit_bytes) for path in folder.iterdir())
        self._entries = [entry for entry in listed if entry is not None]

    @property
    def bytes(self) -> int:
        return sum(entry.size for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, tokens: Sequence[int], current_reuse: int) -> SavedState | None:
        """The stored state sharing the longest prefix with `tokens`, if that is at least
        `min_tokens` and more than `current_reuse` (what the cache already offers)."""
        best: _Entry | None = None
        best_reuse = max(current_reuse, self.min_tokens - 1)
        for entry in self._entries:
            reuse = common_prefix(entry.tokens, tokens)
            if reuse > best_reuse:
                best, best_reuse = entry, reuse
        if best is None:
            return None
        try:
            data = _read_data(best.path, best.tokens, best.size)
        except OSError as exc:
            _log.warning("could not read a stored prompt state %s: %s", best.path.name, exc)
            self.forget(best.tokens)
            return None
        best.used = _touch(best.path)
        return SavedState(best.tokens, data)

    def forget(self, tokens: Tokens) -> None:
        """Delete the state stored for `tokens` (one that failed to restore)."""
        for entry in [e for e in self._entries if np.array_equal(e.tokens, tokens)]:
            self._delete(entry)

    def covers(self, tokens: Sequence[int] | Tokens) -> bool:
        """Whether a stored state holds all of `tokens` already."""
        return self._stored_prefix(tokens) == len(tokens)

    def worth_saving(self, tokens: Sequence[int] | Tokens) -> bool:
        """Whether `tokens` are long enough for a file and hold at least half of
        `min_tokens` more than a stored state does: each agent turn adds a little to the
        conversation, and writing its whole state again for a few tokens would cost a
        file write of hundreds of megabytes a turn."""
        if len(tokens) < self.min_tokens:
            return False
        return len(tokens) - self._stored_prefix(tokens) >= max(1, self.min_tokens // 2)

    def _stored_prefix(self, tokens: Sequence[int] | Tokens) -> int:
        return max((common_prefix(entry.tokens, tokens) for entry in self._entries), default=0)

    def save(self, state: SavedState) -> bool:
        """Store `state` unless it is short, already covered, or larger than the whole limit;
        states it extends are deleted, then the least recently used over the limit."""
        tokens = state.tokens
        size = _HEADER + tokens.nbytes + state.size
        if len(tokens) < self.min_tokens or size > self.limit_bytes or self.covers(tokens):
            return False
        path = self.folder / f"{hashlib.sha256(tokens.tobytes()).hexdigest()[:32]}{SUFFIX}"
        try:
            _write(path, tokens, state.data)
        except OSError as exc:
            _log.warning("could not store a prompt state in %s: %s", self.folder, exc)
            return False
        for entry in [e for e in self._entries if common_prefix(e.tokens, tokens) == len(e.tokens)]:
            self._delete(entry)
        self._entries.append(_Entry(path, tokens, size, _touch(path)))
        for entry in sorted(self._entries, key=lambda e: e.used):
            if self.bytes <= self.limit_bytes:
                break
            self._delete(entry)
        return True

    def _delete(self, entry: _Entry) -> None:
        self._entries.remove(entry)
        entry.path.unlink(missing_ok=True)


def _write(path: Path, tokens: Tokens, data: bytearray) -> None:
    """All of the file or none: 0600 from its first byte, renamed into place when whole."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    stored = tokens.astype("<i4").tobytes()
    checksum = _checksum((stored, data))
    try:
        with os.fdopen(open_private(temporary), "wb") as handle:
            handle.write(MAGIC + len(tokens).to_bytes(8, "little") + checksum)
            handle.write(stored)
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _checksum(parts: Iterable[bytes | bytearray]) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


def _read_entry(path: Path, limit_bytes: int) -> _Entry | None:
    """A stored state's tokens (not its data, read when restored). Leftovers of a crash and
    files that are not states are deleted; what is not a file of ours is left alone."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        _log.warning("passing over %s in the prompt store: not a file of yours", path.name)
        return None
    if path.name.startswith(".") and path.name.endswith(".tmp"):
        path.unlink(missing_ok=True)
        return None
    if path.suffix != SUFFIX:
        return None
    try:
        with _open_state(path) as handle:
            count, size = _header(handle)
            if size > limit_bytes:
                raise ValueError(f"{size} bytes, more than the store's limit")
            handle.seek(32, os.SEEK_CUR)  # the checksum, checked when the state is restored
            tokens = np.frombuffer(handle.read(4 * count), dtype="<i4").astype(np.int32)
    except (OSError, ValueError) as exc:
        _log.warning("deleting an unreadable prompt state %s: %s", path.name, exc)
        path.unlink(missing_ok=True)
        return None
    if len(tokens) != count:
        path.unlink(missing_ok=True)
        return None
    return _Entry(path, tokens, size, info.st_mtime)


def _open_state(path: Path) -> BinaryIO:
    """`path` opened to read, never through a link, never blocking on a FIFO swapped in."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    handle = os.fdopen(descriptor, "rb")
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        handle.close()
        raise OSError(f"{path.name} is not a regular file")
    return handle


def _header(handle: BinaryIO) -> tuple[int, int]:
    """The token count and the file's size, checked against each other before any of the
    tokens are read: a count of 2**40 in a file of a few bytes is a damaged file, not a
    request for terabytes."""
    size = os.fstat(handle.fileno()).st_size
    head = handle.read(len(MAGIC) + 8)
    if not head.startswith(MAGIC) or len(head) != len(MAGIC) + 8:
        raise ValueError("not a localspec prompt state")
    count = int.from_bytes(head[len(MAGIC) :], "little")
    if count == 0 or _HEADER + 4 * count > size:
        raise ValueError(f"a count of {count} tokens in a file of {size} bytes")
    return count, size


def _read_data(path: Path, tokens: Tokens, listed_size: int) -> bytearray:
    """The state stored for `tokens`, refused (OSError) unless the file is still the one
    listed (its tokens and size: no more than the store's limit is read) and its checksum
    matches."""
    with _open_state(path) as handle:
        try:
            count, size = _header(handle)
        except ValueError as exc:
            raise OSError(str(exc)) from exc
        checksum = handle.read(32)
        stored = handle.read(4 * count)
        if size != listed_size or count != len(tokens) or stored != tokens.astype("<i4").tobytes():
            raise OSError("the file changed since it was listed")
        data = bytearray(handle.read(size - _HEADER - 4 * count))
    if _checksum((stored, data)) != checksum:
        raise OSError("its checksum does not match: the file is damaged")
    return data


def _touch(path: Path) -> float:
    """Mark `path` used now (its modification time orders eviction across restarts)."""
    try:
        os.utime(path)
        return path.stat().st_mtime
    except OSError:
        return 0.0
