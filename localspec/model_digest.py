"""A model file's SHA-256, computed once per version of the file and remembered.

What is kept for a model (its prompt states on disk) must belong to the file's content, not
its name: a file replaced in place by another of the same size with its time kept (`cp -p`,
`rsync -a`) is another model, and a KV state of the old one restored into it answers wrongly.
Hashing a file of gigabytes takes seconds, so the digest is remembered (0600, in the cache
folder) under what identifies one version of the file: its path, size, inode and device,
modification time and inode change time. The last cannot be set back by the user (`cp -p`
and `touch` change it), so a file with the same record has not been written since it was
hashed. A record that does not match, or a memory that cannot be read, costs one hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.paths import cache_dir, read_private_json, write_private

_log = logging.getLogger(__name__)

_CHUNK = 1 << 22
_MEMORY_LIMIT = 1 << 20
"""Bytes of remembered digests read at most: a file larger than this is not ours."""
_KEPT = 64
"""Files remembered at most: the most recent ones."""


def memory_path() -> Path:
    return cache_dir() / "model-digests.json"


def model_digest(path: Path) -> str:
    """The SHA-256 of the file at `path` (hex), remembered while the file is not written."""
    real = path.resolve()
    info = real.stat()
    version = [info.st_size, info.st_ino, info.st_dev, info.st_mtime_ns, info.st_ctime_ns]
    memory = _remembered()
    known = memory.get(str(real))
    if isinstance(known, dict) and known.get("version") == version:
        digest = known.get("sha256")
        if isinstance(digest, str) and len(digest) == 64:
            return digest
    digest = _sha256(real)
    memory.pop(str(real), None)
    memory[str(real)] = {"version": version, "sha256": digest}
    kept = dict(list(memory.items())[-_KEPT:])
    try:
        write_private(memory_path(), json.dumps(kept))
    except (OSError, LocalspecError) as exc:
        _log.warning("cannot remember the digest of %s (%s): it is hashed again", real, exc)
    return digest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _remembered() -> dict[str, object]:
    """The remembered digests; anything unreadable or not of their shape is none."""
    try:
        data = read_private_json(memory_path(), _MEMORY_LIMIT)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
