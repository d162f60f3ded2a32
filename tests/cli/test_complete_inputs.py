"""`complete`'s inputs are bounded by the bytes read, not by the size a file says it has, and
its output failing (a full disk) is one line: the real command, on /dev/zero and /dev/full."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import LOCALSPEC

_MEMORY_CAP = 2 * 2**30  # the command may take this much: reading /dev/zero whole would not


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_CAP, _MEMORY_CAP))


def _complete(*args: str | Path, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCALSPEC, "complete", "--no-server", *map(str, args)],
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
        preexec_fn=_capped,
        check=False,
    )


@pytest.mark.parametrize(
    ("option", "shown"),
    [
        (("--file", "/dev/zero"), "/dev/zero is more than 16 MiB"),
        (("--fim", "--suffix-file", "/dev/zero"), "--suffix-file /dev/zero is more than 16 MiB"),
        (("--grammar", "/dev/zero"), "--grammar /dev/zero is more than 16 MiB"),
        (("--json-schema", "/dev/zero"), "--json-schema /dev/zero is more than 16 MiB"),
    ],
)
def test_an_endless_file_is_refused_after_16_mib(
    tiny_target: Path, option: tuple[str, ...], shown: str
) -> None:
    done = _complete("--target", tiny_target, *option, "hello")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert shown in line and "internal error" not in line


def test_endless_stdin_is_refused_after_16_mib(tiny_target: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        done = _complete("--target", tiny_target, "hello", stdin=zero.fileno())
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "localspec: error: the text on stdin is more than 16 MiB: no context window holds it "
        "(inputs over 16 MiB are not read)"
    ]


def test_an_answer_written_to_a_full_disk_is_one_line(tiny_target: Path) -> None:
    asked = ("--target", str(tiny_target), "--raw", "--max-tokens", "4", "--spec", "off")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [LOCALSPEC, "complete", "--no-server", *asked, "hello"],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == [
        "localspec: error: cannot write the output (No space left on device): free some space "
        "or send it elsewhere"
    ], done.stderr
    assert "Exception ignored" not in done.stderr and os.strerror(28) in done.stderr
