"""`complete`'s output failing (a full disk) is one line: the real command, on /dev/full."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

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
