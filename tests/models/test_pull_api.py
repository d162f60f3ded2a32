"""The registry's public "where is it / fetch it" API, in process, against the fake Hub.

`localspec pull` (tests/models/test_pull.py) drives the same `pull` from a subprocess; here a
caller like the chat app asks where a file is and fetches it with a progress callback.
huggingface_hub reads its endpoint and cache once at import, so the test points its constants
at the fake Hub and a temporary cache.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

import localspec.models
from localspec.models import ModelEntry, Pulled, installed_path, pull
from tests.models.fake_hub import FakeHub

REPO = "someone/tiny-GGUF"
REVISION = "5f0c1a7e" * 5
CHUNK = constants.DOWNLOAD_CHUNK_SIZE
DATA = random.Random(1).randbytes(CHUNK + CHUNK // 2)
ENTRY = ModelEntry(
    name="big",
    repo=REPO,
    file="big.gguf",
    revision=REVISION,
    size=len(DATA),
    sha256=hashlib.sha256(DATA).hexdigest(),
)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hub"


def hub_at(monkeypatch: pytest.MonkeyPatch, hub: FakeHub, cache: Path) -> None:
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_the_api_is_exported_from_the_models_package() -> None:
    names = {"installed_path", "pull", "Pulled", "Progress", "Report"}
    assert names <= set(localspec.models.__all__)


def test_progress_follows_the_download_and_the_file_is_then_installed(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    seen: list[float | None] = []
    lines: list[str] = []
    result: list[Pulled] = []
    with FakeHub({(REPO, ENTRY.file or ""): DATA}, REVISION, hold_after=CHUNK) as hub:
        hub_at(monkeypatch, hub, cache)
        assert installed_path(ENTRY) is None
        fetching = threading.Thread(
            target=lambda: result.append(pull(ENTRY, report=lines.append, progress=seen.append))
        )
        fetching.start()
        try:
            # huggingface_hub writes whole chunks: with the rest held back, the folder has
            # grown by exactly one, and the poll reports that fraction while the Hub waits
            one_chunk = CHUNK / len(DATA)
            deadline = time.monotonic() + 60  # a hang guard
            while one_chunk not in seen and fetching.is_alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert one_chunk in seen, f"no progress of {one_chunk} reported: {seen}"
        finally:
            hub.release.set()
            fetching.join(60)
    (pulled,) = result
    assert pulled.source == "hub" and pulled.path.read_bytes() == DATA
    assert installed_path(ENTRY) == pulled.path
    fractions = [f for f in seen if f is not None]
    assert fractions == seen and fractions == sorted(fractions)
    assert (fractions[0], fractions[-1]) == (0.0, 1.0)
    assert lines[0] == f"downloading {REPO}/{ENTRY.file} ({REVISION[:12]}) from the Hub"


def test_a_file_already_here_reports_no_progress_and_asks_nothing(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    with FakeHub({(REPO, ENTRY.file or ""): DATA}, REVISION) as hub:
        hub_at(monkeypatch, hub, cache)
        first = pull(ENTRY, report=lambda _line: None)
        asked = len(hub.requests)
        seen: list[float | None] = []
        again = pull(ENTRY, verify_cached=False, report=lambda _line: None, progress=seen.append)
        assert len(hub.requests) == asked
    assert (first.source, again.source, again.path) == ("hub", "cache", first.path)
    assert seen == []


def test_without_a_size_the_progress_is_unknown(
    monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    unsized = ModelEntry(name="unsized", repo=REPO, file="small.gguf", revision=REVISION)
    seen: list[float | None] = []
    with FakeHub({(REPO, "small.gguf"): b"GGUF" + bytes(60)}, REVISION) as hub:
        hub_at(monkeypatch, hub, cache)
        pulled = pull(unsized, report=lambda _line: None, progress=seen.append)
    assert pulled.source == "hub" and installed_path(unsized) == pulled.path
    assert seen == [None]


def test_a_local_path_is_where_it_is(tmp_path: Path) -> None:
    file = tmp_path / "model.gguf"
    entry = ModelEntry(name="mine", path=file)
    assert installed_path(entry) is None
    file.write_bytes(b"GGUF")
    seen: list[float | None] = []
    assert installed_path(entry) == file
    assert pull(entry, progress=seen.append) == Pulled(entry, file, "local") and seen == []
