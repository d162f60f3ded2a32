"""Trust on first use, for the registry entries localspec cannot verify.

A verified entry carries a pinned revision, size and SHA-256 read from the Hub, and every
download is checked against them. An unverified one (`verified = false` in models.toml, or an
ad-hoc `owner/repo/file.gguf` reference) still gets a weaker promise: the SHA-256 and size of
its first download are recorded in a private file in the user's state folder, and every later
download, or copy found in the Hugging Face cache, of the same repo, file and revision must
match them. That catches a file replaced upstream or damaged on the way; it cannot tell
whether the first copy was the right one, which is why `pull` says in one line what it took
on trust.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from localspec.errors import ChecksumError
from localspec.models.hub_cache import sha256_of
from localspec.models.registry import ModelEntry
from localspec.paths import (
    open_private,
    private_folder,
    read_private_json,
    state_dir,
    write_private,
)


def trust_file() -> Path:
    """The private (0600) JSON file of first downloads: repo/file@revision -> sha256, size."""
    return state_dir() / "first-downloads.json"


@dataclass(frozen=True)
class FirstDownload:
    sha256: str
    size: int
    recorded: str  # when, as YYYY-MM-DD, so a mismatch says how old the trusted copy is


def _key(entry: ModelEntry) -> str:
    return f"{entry.repo}/{entry.file}@{entry.revision}"


def _load(path: Path) -> dict[str, Any]:
    """The records; none while the file does not exist. A file that cannot be read or is not
    one is an error, never taken as empty: that would record whatever copy is in hand as a
    first download and write over every other model's record."""
    try:
        data = read_private_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ChecksumError(
            f"{path} cannot be read as localspec's record of first downloads ({exc}): fix it, "
            f"or move it away to record the unverified models' next downloads afresh"
        ) from exc
    if not isinstance(data, dict):
        raise ChecksumError(
            f"{path} is not localspec's record of first downloads (not a JSON object): fix "
            f"it, or move it away to record the unverified models' next downloads afresh"
        )
    return data


def recorded(entry: ModelEntry, path: Path | None = None) -> FirstDownload | None:
    """What the first download of `entry` was, if one was recorded (never for local paths)."""
    if entry.repo is None:
        return None
    raw = _load(path or trust_file()).get(_key(entry))
    if not isinstance(raw, dict):
        return None
    sha256, size = raw.get("sha256"), raw.get("size")
    if not isinstance(sha256, str) or not isinstance(size, int):
        return None
    return FirstDownload(sha256, size, str(raw.get("recorded", "?")))


def with_record(entry: ModelEntry) -> ModelEntry:
    """`entry` with the size and SHA-256 it lacks taken from its first download, for what
    needs them ahead of a download (the free-space check, the progress fraction)."""
    first = recorded(entry)
    if first is None:
        return entry
    return replace(entry, size=entry.size or first.size, sha256=entry.sha256 or first.sha256)


def check_first_use(
    entry: ModelEntry, blob: Path, *, digest: str | None, report: Callable[[str], None]
) -> str:
    """Hold `blob` to the first download of `entry`, or record it as that first download.

    `digest` is the file's SHA-256 when the caller already knows it (it matched the
    registry's), so an 18 GB file is not hashed twice. Returns the SHA-256. A file that
    differs from the recorded one is removed and raises `ChecksumError`, in one line.
    """
    path = trust_file()
    size = blob.stat().st_size
    first = recorded(entry, path)
    if first is not None and size != first.size:
        want = f"{first.size} bytes"
        _refuse(entry, blob, got=f"{size} bytes", want=want, first=first, path=path)
    digest = digest or sha256_of(blob)
    if first is not None:
        if digest != first.sha256:
            _refuse(entry, blob, got=f"SHA-256 {digest}", want=first.sha256, first=first, path=path)
        return digest
    with _locked(path):  # two pulls at once must not lose each other's record
        data = _load(path)
        data[_key(entry)] = {
            "sha256": digest,
            "size": size,
            "recorded": time.strftime("%Y-%m-%d"),
            "name": entry.name,
        }
        write_private(path, json.dumps(data, indent=1, sort_keys=True))
    report(
        f"{entry.name} is not verified by localspec: recorded SHA-256 {digest} ({size} bytes) "
        f"from this first copy in {path}; later downloads must match it"
    )
    return digest


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on a private lock file beside `path`, for a read-change-write."""
    private_folder(path.parent)
    with os.fdopen(open_private(path.with_name(path.name + ".lock"), append=True), "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _refuse(
    entry: ModelEntry, blob: Path, *, got: str, want: str, first: FirstDownload, path: Path
) -> NoReturn:
    blob.unlink(missing_ok=True)
    raise ChecksumError(
        f"{entry.name}: the file has {got} but its first download ({first.recorded}) had "
        f"{want}; it was removed. localspec does not verify this entry and holds it to that "
        f"first copy: if the publisher changed the file on purpose, delete "
        f'"{_key(entry)}" from {path} and pull again'
    )
