"""`complete` keeps the suffix store in the state folder for the next process, privately, per
project folder; `--no-suffix-store` keeps it in memory; a running server keeps its own."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np

from localspec.paths import state_dir
from localspec.suffix_file import MAGIC
from tests.test_cli import localspec


def _stored() -> list[Path]:
    folder = state_dir() / "suffix"
    return sorted(folder.iterdir()) if folder.exists() else []


def _store_drafted(stdout: str) -> int:
    by_source = json.loads(stdout)["stats"]["by_proposer"]
    return int(by_source.get("ngram-store", {}).get("drafted", 0))


def test_the_next_complete_drafts_from_the_last_ones_answer(tiny_target: Path) -> None:
    common = ("complete", "--no-server", "--target", tiny_target, "--ctx-size", "256", "--raw")
    asked = (*common, "--spec", "ngram", "--max-tokens", "24", "--json", "hello there")
    kept_in_memory = localspec(*asked, "--no-suffix-store")
    assert kept_in_memory.returncode == 0, kept_in_memory.stderr
    assert _stored() == []
    first = localspec(*asked)
    assert first.returncode == 0, first.stderr
    assert _store_drafted(first.stdout) == 0  # nothing stored before it
    [store] = _stored()
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    second = localspec(*asked)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["text"] == json.loads(first.stdout)["text"]
    assert _store_drafted(second.stdout) > 0
    off = localspec(*asked, "--no-suffix-drafts")
    assert off.returncode == 0, off.stderr
    assert _store_drafted(off.stdout) == 0


def test_a_stored_id_outside_the_vocabulary_never_reaches_the_model(tiny_target: Path) -> None:
    """A damaged store whose record matches the prompt: its ids are dropped, not drafted."""
    asked = (
        *("complete", "--no-server", "--target", tiny_target, "--ctx-size", "256", "--raw"),
        *("--spec", "ngram", "--max-tokens", "24", "--json", "hello there"),
    )
    first = localspec(*asked)
    assert first.returncode == 0, first.stderr
    [store] = _stored()
    ids = np.frombuffer(store.read_bytes()[len(MAGIC) :], dtype="<u4").tolist()
    text = ids[1 : 1 + ids[0]]  # the first record: the prompt and its answer
    damaged = [*text[:-1], *[9_999_999, 2**31 + 5, 2**32 - 1] * 60]  # drafted after a match
    store.write_bytes(MAGIC + np.asarray([len(damaged), *damaged], dtype="<u4").tobytes())
    for _ in range(2):  # across processes: the file no longer holds it
        again = localspec(*asked)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["text"] == json.loads(first.stdout)["text"]
