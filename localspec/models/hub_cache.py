"""The Hugging Face hub cache layout, and file verification against the registry.

Files fetched from a mirror are placed exactly where `huggingface_hub` would have put them
(blobs/<sha256>, snapshots/<revision>/<file> -> blob, refs/main), so every later load goes
through the real `hf_hub_download(..., local_files_only=True)` path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from huggingface_hub import constants

from localspec.errors import ChecksumError, DiskSpaceError
from localspec.models.registry import ModelEntry


def hub_cache_dir() -> Path:
    """The cache huggingface_hub uses (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/...)."""
    return Path(constants.HF_HUB_CACHE)


def repo_dir(entry: ModelEntry, cache: Path) -> Path:
    assert entry.repo is not None
    return cache / ("models--" + entry.repo.replace("/", "--"))


def downloaded_bytes(entry: ModelEntry, cache: Path) -> int:
    """Bytes in the entry's folder of the cache, partial downloads included (0 for a path)."""
    if entry.repo is None:
        return 0
    total = 0
    for path in repo_dir(entry, cache).rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except FileNotFoundError:  # renamed (the finished download) while it was counted
            continue
    return total


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(entry: ModelEntry, path: Path) -> None:
    """Raise `ChecksumError` (after deleting `path`) unless it has the promised size and hash."""
    size = path.stat().st_size
    problem = None
    if entry.size is not None and size != entry.size:
        problem = f"{size} bytes instead of {entry.size}"
    elif entry.sha256 is not None and (digest := sha256_of(path)) != entry.sha256:
        problem = f"SHA-256 {digest} instead of {entry.sha256}"
    if problem:
        path.unlink(missing_ok=True)
        raise ChecksumError(
            f"{entry.name}: the downloaded file has {problem}; it was removed. Run "
            f"`localspec pull {entry.name}` again; if it keeps failing, the source changed "
            f"and the registry entry needs updating"
        )


def ensure_free_space(entry: ModelEntry, folder: Path, factor: float = 1.0) -> None:
    """Refuse early when `folder`'s disk cannot hold `factor` x the file (plus 100 MB)."""
    if entry.size is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    needed = int(entry.size * factor) + 100 * 2**20
    if free < needed:
        raise DiskSpaceError(
            f"{entry.name} needs {needed / 2**30:.1f} GiB free in {folder} but only "
            f"{free / 2**30:.1f} GiB is: free some space or set HF_HUB_CACHE to another disk"
        )


def place_blob(entry: ModelEntry, verified_file: Path, cache: Path) -> Path:
    """Move a verified file into the cache layout; returns the snapshot path."""
    assert entry.file is not None and entry.sha256 is not None and entry.pinned
    root = repo_dir(entry, cache)
    blob = root / "blobs" / entry.sha256
    blob.parent.mkdir(parents=True, exist_ok=True)
    os.replace(verified_file, blob)
    refs = root / "refs"
    refs.mkdir(exist_ok=True)
    if not (refs / "main").exists():
        (refs / "main").write_text(entry.revision)
    snapshot = root / "snapshots" / entry.revision / entry.file
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if snapshot.is_symlink() or snapshot.exists():
        snapshot.unlink()
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot
