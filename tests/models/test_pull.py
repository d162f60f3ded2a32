"""`localspec pull` as a real subprocess, fetching through huggingface_hub from a fake Hub.

The fake Hub (tests/models/fake_hub.py) is a real HTTP server on 127.0.0.1; `HF_ENDPOINT`
points the subprocess at it and `HF_HUB_CACHE` at a temporary cache, so everything from the
HEAD request to the snapshot symlink is huggingface_hub's own code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import random
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from localspec.models.hub_cache import place_blob
from localspec.models.registry import ModelEntry
from tests.models.fake_hub import FakeHub, Request

LOCALSPEC = str(Path(sys.executable).with_name("localspec"))
REPO = "someone/tiny-GGUF"
TINY = "tiny.gguf"
BIG = "big.gguf"
REVISION = "5f0c1a7e" * 5
# huggingface_hub writes a download in chunks of this size; a chunk cut short is thrown away
CHUNK = constants.DOWNLOAD_CHUNK_SIZE
NOWHERE = "http://127.0.0.1:1"  # nothing listens on port 1: connections are refused at once

Files = dict[tuple[str, str], bytes]


@pytest.fixture(scope="session")
def big_bytes() -> bytes:
    """One and a half download chunks, so a cut after the first chunk can be resumed."""
    return random.Random(0).randbytes(CHUNK + CHUNK // 2)


@pytest.fixture
def files(tiny_target: Path, big_bytes: bytes) -> Files:
    """What the fake Hub serves; the user registry names each file with its size and SHA-256.

    The registry file goes where the subprocess looks for it: the autouse fixture moved
    XDG_CONFIG_HOME into the test's folder, and the subprocess inherits the environment.
    """
    served = {(REPO, TINY): tiny_target.read_bytes(), (REPO, BIG): big_bytes}
    lines = ['default_pair = "tiny-pair"']
    for name, file in (("tiny", TINY), ("big", BIG)):
        data = served[(REPO, file)]
        lines += [
            f"[models.{name}]",
            f'repo = "{REPO}"',
            f'file = "{file}"',
            f'revision = "{REVISION}"',
            f"size = {len(data)}",
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"',
        ]
    lines += [
        "[models.missing]",
        f'repo = "{REPO}"',
        'file = "missing.gguf"',
        f'revision = "{REVISION}"',
        "[pairs.tiny-pair]",
        'target = "tiny"',
        'draft = "tiny"',
    ]
    registry = Path(os.environ["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text("\n".join(lines) + "\n")
    return served


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hub"


def snapshot(cache: Path, file: str = TINY) -> Path:
    return cache / "models--someone--tiny-GGUF" / "snapshots" / REVISION / file


def blobs(cache: Path) -> list[Path]:
    folder = cache / "models--someone--tiny-GGUF" / "blobs"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def resolves(hub: FakeHub) -> list[Request]:
    """The file requests (HEAD and GET on `resolve`), without huggingface_hub's other calls."""
    return [request for request in hub.requests if "/resolve/" in request.path]


def environment(endpoint: str, cache: Path) -> dict[str, str]:
    # drop the developer's own HF_* settings (offline mode, token, disabled bars), keep HF_HOME
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") or k == "HF_HOME"}
    env.pop("TQDM_POSITION", None)
    return {**env, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(cache)}


def localspec(*args: str, endpoint: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(endpoint, cache),
        cwd=cache.parent,
        check=False,
    )


def on_terminal(*args: str, endpoint: str, cache: Path) -> tuple[int, str]:
    """Run localspec with stderr on a pseudo-terminal 100 columns wide: (exit code, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [LOCALSPEC, *args],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=environment(endpoint, cache),
        cwd=cache.parent,
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end of the terminal
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
    return process.wait(timeout=60), output.decode(errors="replace")


def test_pull_downloads_into_the_hub_cache_then_uses_it(files: Files, cache: Path) -> None:
    with FakeHub(files, REVISION) as hub:
        first = localspec("pull", "tiny", endpoint=hub.url, cache=cache)
        assert first.returncode == 0, first.stderr
        name, source, _, path = first.stdout.strip().split("\t")
        assert (name, source, Path(path)) == ("tiny", "hub", snapshot(cache))
        assert snapshot(cache).read_bytes() == files[(REPO, TINY)]
        assert f"downloading {REPO}/{TINY} ({REVISION[:12]}) from the Hub" in first.stderr
        assert [(r.method, r.range) for r in resolves(hub)] == [("HEAD", None), ("GET", None)]

        fetched = resolves(hub)
        again = localspec("pull", "tiny", "--offline", endpoint=hub.url, cache=cache)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().split("\t")[1] == "cache"
        assert resolves(hub) == fetched

        listing = localspec("models", "--json", endpoint=hub.url, cache=cache)
    assert listing.returncode == 0, listing.stderr
    report = json.loads(listing.stdout)
    assert report["models"]["tiny"]["installed"]
    assert report["models"]["tiny"]["path"] == str(snapshot(cache))
    assert not report["models"]["big"]["installed"]
    pair = report["pairs"]["tiny-pair"]
    assert (pair["target"], pair["draft"]) == ("tiny", "tiny")
    assert pair["installed"] and pair["compatible"] and pair["default"]
    assert pair["problems"] == []


def test_the_progress_bar_shows_on_a_terminal(files: Files, cache: Path) -> None:
    # huggingface_hub's tqdm bar uses disable=None, which turns it off when stderr is not a
    # terminal: with stderr captured through a pipe only localspec's "downloading" line shows
    # (asserted above), so this test gives the command a pseudo-terminal as a user's shell does
    with FakeHub(files, REVISION) as hub:
        code, stderr = on_terminal("pull", "tiny", endpoint=hub.url, cache=cache)
    assert code == 0, stderr
    assert "downloading someone/tiny-GGUF/tiny.gguf" in stderr
    # the finished bar: "tiny.gguf: 100%|█████| 444k/444k [00:00<00:00, 241MB/s]"
    assert re.search(r"tiny\.gguf: 100%\|.*\| (\S+)/\1 \[", stderr), stderr


@pytest.mark.parametrize(
    ("file", "cut_after", "resumed_from"),
    [
        pytest.param(BIG, CHUNK + CHUNK // 4, CHUNK, id="after-a-full-chunk"),
        pytest.param(TINY, None, None, id="inside-the-first-chunk"),
    ],
)
def test_a_cut_connection_is_resumed_within_the_same_pull(
    files: Files, cache: Path, file: str, cut_after: int | None, resumed_from: int | None
) -> None:
    """huggingface_hub retries a body cut short (up to 5 times, 1 s apart) in the same process.

    The retry asks for `Range: bytes=N-` where N counts only whole chunks written to the file
    (10 MiB each); bytes of an unfinished chunk are lost, so a cut inside the first chunk
    restarts from byte 0.
    """
    data = files[(REPO, file)]
    cut = cut_after if cut_after is not None else len(data) // 2
    with FakeHub(files, REVISION, cut_after=cut) as hub:
        result = localspec("pull", file.removesuffix(".gguf"), endpoint=hub.url, cache=cache)
    assert result.returncode == 0, result.stderr
    assert "Trying to resume download" in result.stderr
    assert snapshot(cache, file).read_bytes() == data
    first, retry = [r for r in resolves(hub) if r.method == "GET"]
    assert (first.range, first.sent) == (None, cut)
    if resumed_from is None:
        assert (retry.range, retry.status, retry.sent) == (None, 200, len(data))
    else:
        assert retry.range == f"bytes={resumed_from}-"
        assert (retry.status, retry.sent) == (206, len(data) - resumed_from)
    assert not list(cache.rglob("*.incomplete"))


def test_an_interrupted_pull_keeps_no_partial_file_and_the_next_one_starts_over(
    files: Files, cache: Path
) -> None:
    # A reset connection is not retried by huggingface_hub 2.4, and the partial file it wrote
    # has a name unique to that process and is deleted when the download fails: a later
    # `localspec pull` cannot resume it and downloads the whole file again.
    data = files[(REPO, BIG)]
    with FakeHub(files, REVISION, cut_after=CHUNK + CHUNK // 4, reset=True) as hub:
        failed = localspec("pull", "big", endpoint=hub.url, cache=cache)
        assert failed.returncode == 1
        assert not list(cache.rglob("*.incomplete"))
        assert blobs(cache) == []
        assert not snapshot(cache, BIG).exists()

        retried = localspec("pull", "big", endpoint=hub.url, cache=cache)
    assert retried.returncode == 0, retried.stderr
    assert snapshot(cache, BIG).read_bytes() == data
    assert [r.range for r in resolves(hub) if r.method == "GET"] == [None, None]


def test_a_broken_connection_is_a_one_line_error(files: Files, cache: Path) -> None:
    with FakeHub(files, REVISION, cut_after=1000, reset=True) as hub:
        result = localspec("pull", "tiny", endpoint=hub.url, cache=cache)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "localspec: error: downloading someone/tiny-GGUF/tiny.gguf failed" in result.stderr


def test_a_checksum_mismatch_removes_the_file(files: Files, cache: Path) -> None:
    with FakeHub(files, REVISION, corrupt=True) as hub:
        result = localspec("pull", "tiny", endpoint=hub.url, cache=cache)
    assert result.returncode == 1
    assert "SHA-256" in result.stderr
    assert "removed" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert blobs(cache) == []
    assert not snapshot(cache).exists()
    assert not snapshot(cache).is_symlink()
    assert not list(cache.rglob("*.incomplete"))


def test_a_file_missing_on_the_hub_points_at_the_registry_entry(files: Files, cache: Path) -> None:
    with FakeHub(files, REVISION) as hub:
        result = localspec("pull", "missing", endpoint=hub.url, cache=cache)
    assert result.returncode == 1
    assert "EntryNotFound" in result.stderr
    assert "check the registry entry" in result.stderr
    assert [(r.method, r.status) for r in resolves(hub)] == [("HEAD", 404)]


def test_a_blocked_hub_is_not_blamed_on_the_registry_entry(files: Files, cache: Path) -> None:
    with FakeHub(files, REVISION, refuse=403) as hub:
        result = localspec("pull", "tiny", endpoint=hub.url, cache=cache)
    assert result.returncode == 1
    assert "downloading someone/tiny-GGUF/tiny.gguf failed" in result.stderr
    assert "check the registry entry" not in result.stderr


def test_offline_pull_makes_no_request_at_all(files: Files, cache: Path) -> None:
    data = files[(REPO, TINY)]
    entry = ModelEntry(
        "tiny", REPO, TINY, REVISION, size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    download = cache.parent / "download.part"
    download.write_bytes(data)
    place_blob(entry, download, cache)
    with FakeHub(files, REVISION) as hub:
        result = localspec("pull", "tiny", "--offline", endpoint=hub.url, cache=cache)
        assert result.returncode == 0, result.stderr
        assert hub.requests == []


def test_an_unknown_name_suggests_the_closest(files: Files, cache: Path) -> None:
    result = localspec("pull", "tinny", endpoint=NOWHERE, cache=cache)
    assert result.returncode == 2
    assert "did you mean 'tiny'?" in result.stderr


def test_offline_with_nothing_cached_fails(files: Files, cache: Path) -> None:
    result = localspec("pull", "tiny", "--offline", endpoint=NOWHERE, cache=cache)
    assert result.returncode == 1
    assert "--offline forbids fetching" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_hub_without_mirrors_fails(files: Files, cache: Path) -> None:
    """No retry loop: the helper's subprocess timeout is the hang guard, not a speed test."""
    result = localspec("pull", "tiny", endpoint=NOWHERE, cache=cache)
    assert result.returncode == 1
    assert "cannot be reached" in result.stderr
    assert "it lists no mirror" in result.stderr
    assert "Traceback" not in result.stderr
