"""Trust on first use: an unverified entry is held to the SHA-256 and size of its first copy.

In process against the fake Hub (tests/models/fake_hub.py, a real HTTP server on 127.0.0.1),
as in test_pull_api.py; the record goes to the state folder the autouse fixture made private
to the test. No network: the Hub here is the fake one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from pathlib import Path

import pytest

from localspec.errors import ChecksumError
from localspec.models import ModelEntry, installed_path, pull
from localspec.models.trust import recorded, trust_file
from tests.models.fake_hub import FakeHub
from tests.models.test_pull_api import hub_at

REPO = "someone/new-GGUF"
FILE = "new.gguf"
REVISION = "7e57ab1e" * 5
FIRST = b"GGUF" + bytes(range(256)) * 40
CHANGED = b"GGUF" + bytes(range(255, -1, -1)) * 40
# an entry as `verified = false` leaves it: no size, no SHA-256, the revision a branch
UNVERIFIED = ModelEntry(name="new", repo=REPO, file=FILE, revision="main")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hub"


def fetch(
    monkeypatch: pytest.MonkeyPatch, cache: Path, data: bytes, entry: ModelEntry = UNVERIFIED
) -> list[str]:
    """Pull `entry` from a fresh cache while the Hub serves `data`; the lines it reported."""
    shutil.rmtree(cache, ignore_errors=True)
    lines: list[str] = []
    with FakeHub({(REPO, FILE): data}, REVISION) as hub:
        hub_at(monkeypatch, hub, cache)
        pull(entry, report=lines.append)
    return lines


def test_the_first_download_is_recorded_and_said_in_one_line(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    assert not UNVERIFIED.verified
    lines = fetch(monkeypatch, cache, FIRST)
    digest = hashlib.sha256(FIRST).hexdigest()
    told = [line for line in lines if "not verified by localspec" in line]
    assert told == [
        f"new is not verified by localspec: recorded SHA-256 {digest} ({len(FIRST)} bytes) "
        f"from this first copy in {trust_file()}; later downloads must match it"
    ]
    first = recorded(UNVERIFIED)
    assert first is not None and (first.sha256, first.size) == (digest, len(FIRST))
    assert stat.S_IMODE(trust_file().stat().st_mode) == 0o600
    record = json.loads(trust_file().read_text())
    assert list(record) == [f"{REPO}/{FILE}@main"]


def test_a_later_download_of_the_same_bytes_passes_quietly(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    fetch(monkeypatch, cache, FIRST)
    again = fetch(monkeypatch, cache, FIRST)
    assert not [line for line in again if "not verified" in line]
    found = installed_path(UNVERIFIED, cache)
    assert found is not None and found.read_bytes() == FIRST


@pytest.mark.parametrize(
    ("served", "difference"),
    [
        pytest.param(CHANGED, f"SHA-256 {hashlib.sha256(CHANGED).hexdigest()}", id="same-size"),
        pytest.param(FIRST + b"!", f"{len(FIRST) + 1} bytes", id="other-size"),
    ],
)
def test_a_download_that_differs_from_the_first_is_refused_and_removed(
    monkeypatch: pytest.MonkeyPatch, cache: Path, served: bytes, difference: str
) -> None:
    fetch(monkeypatch, cache, FIRST)
    with pytest.raises(ChecksumError) as refused:
        fetch(monkeypatch, cache, served)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"new: the file has {difference} but its first download (")
    assert f'delete "{REPO}/{FILE}@main" from {trust_file()}' in message
    assert installed_path(UNVERIFIED, cache) is None
    assert not [blob for blob in cache.rglob("blobs/*") if blob.is_file()]


def test_a_cached_copy_is_held_to_the_first_download_too(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    fetch(monkeypatch, cache, FIRST)
    snapshot = installed_path(UNVERIFIED, cache)
    assert snapshot is not None
    snapshot.resolve().write_bytes(CHANGED)  # damaged (or swapped) in the cache
    with FakeHub({(REPO, FILE): FIRST}, REVISION) as hub:
        hub_at(monkeypatch, hub, cache)
        with pytest.raises(ChecksumError, match="but its first download"):
            pull(UNVERIFIED, report=lambda _line: None)
        assert hub.requests == []  # the cached copy was judged without asking the Hub
    assert installed_path(UNVERIFIED, cache) is None


def test_a_verified_entry_leaves_no_record(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    entry = ModelEntry(
        "checked", REPO, FILE, REVISION, size=len(FIRST), sha256=hashlib.sha256(FIRST).hexdigest()
    )
    assert entry.verified
    lines = fetch(monkeypatch, cache, FIRST, entry)
    assert not [line for line in lines if "not verified" in line]
    assert not trust_file().exists()


def test_a_known_hash_is_checked_first_and_then_recorded_without_hashing_again(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    """An entry with the SHA-256 read from the Hub but no size or pinned revision: the
    registry's hash decides, and the first download's size joins it in the record."""
    digest = hashlib.sha256(FIRST).hexdigest()
    hashed = ModelEntry("hashed", REPO, FILE, "main", sha256=digest, verified=False)
    with pytest.raises(ChecksumError, match=f"SHA-256 .* instead of {digest}"):
        fetch(monkeypatch, cache, CHANGED, hashed)
    assert recorded(hashed) is None
    fetch(monkeypatch, cache, FIRST, hashed)
    first = recorded(hashed)
    assert first is not None and (first.sha256, first.size) == (digest, len(FIRST))


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_a_record_that_cannot_be_read_stops_the_pull_and_is_kept(
    monkeypatch: pytest.MonkeyPatch, cache: Path, content: str
) -> None:
    """Never taken as empty: that would trust whatever copy is in hand and write over every
    other model's record."""
    trust_file().parent.mkdir(parents=True, exist_ok=True)
    trust_file().write_text(content)
    with pytest.raises(ChecksumError, match="record of first downloads") as refused:
        fetch(monkeypatch, cache, FIRST)
    assert "move it away" in str(refused.value) and "\n" not in str(refused.value)
    assert trust_file().read_text() == content
