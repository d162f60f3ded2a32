"""`complete` keeps the suffix store in the state folder for the next process, privately, per
project folder; `--no-suffix-store` keeps it in memory; a running server keeps its own."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from localspec.paths import state_dir
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
