"""localspec's own small state files (the tuner's, the first downloads, the server token) are
read as untrusted: never through a link, never from a FIFO or device, bounded in size, and
JSON nested too deeply for the parser is a file that cannot be used, not a crash."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from localspec.auto_io import TunerStore
from localspec.client import _stored_token
from localspec.errors import ChecksumError
from localspec.models.registry import ModelEntry
from localspec.models.trust import recorded, trust_file
from localspec.paths import STATE_LIMIT, private_folder, token_path
from localspec.server.listen import api_token
from localspec.speculative.tuner import HardwareProfile

_NESTED = b"[" * 200_000


def _plant(path: Path, kind: str, elsewhere: Path) -> None:
    private_folder(path.parent)
    if kind == "nested":
        path.write_bytes(_NESTED)
    elif kind == "huge":
        with path.open("wb") as handle:  # sparse: no disk, but st_size says 17 MiB
            handle.truncate(STATE_LIMIT + 2**20)
    elif kind == "link":
        path.symlink_to(elsewhere)
    else:
        os.mkfifo(path)


def _within(seconds: float, call: Callable[[], object]) -> object:
    """`call()`'s result; a FIFO opened for reading would block it (a hang guard)."""
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "blocked"
    return result[0]


@pytest.mark.parametrize("kind", ["nested", "huge", "link", "fifo"])
def test_the_tuners_files_that_cannot_be_its_own_are_none(tmp_path: Path, kind: str) -> None:
    store = TunerStore()
    elsewhere = tmp_path / "elsewhere.json"
    profile = HardwareProfile(verify_s=(0.03, 0.05), draft_s=0.02)
    elsewhere.write_text(json.dumps({"machine": profile.to_dict()}))
    _plant(store.calibration_file, kind, elsewhere)
    assert _within(30, lambda: store.profile("machine")) is None
    if kind == "link":  # what the link points to is a calibration: only the link is refused
        store.calibration_file.unlink()
        store.calibration_file.write_bytes(elsewhere.read_bytes())
        assert store.profile("machine") == profile


@pytest.mark.parametrize("kind", ["nested", "huge", "link"])
def test_an_unreadable_record_of_first_downloads_is_one_error(tmp_path: Path, kind: str) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    _plant(trust_file(), kind, elsewhere)
    entry = ModelEntry(name="new", repo="someone/model", file="m.gguf", revision="main")
    with pytest.raises(ChecksumError, match="cannot be read as localspec's record") as error:
        recorded(entry)
    assert "\n" not in str(error.value)


def test_a_linked_token_file_is_replaced_not_read(tmp_path: Path) -> None:
    """A link at the token's place could make a guessable file the server's password."""
    guessable = tmp_path / "hostname"
    guessable.write_text("my-laptop\n")
    private_folder(token_path().parent)
    token_path().symlink_to(guessable)
    token = api_token()
    assert token.startswith("ls-") and token != "my-laptop"
    assert not token_path().is_symlink() and token_path().read_text().strip() == token
    assert guessable.read_text() == "my-laptop\n"
    assert api_token() == token


def test_the_client_never_sends_a_linked_file_as_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`complete --server` reads the token `serve` stored: a link there is not read."""
    for name in ("LOCALSPEC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    secret = tmp_path / "secret.txt"
    secret.write_text("a password of another program\n")
    private_folder(token_path().parent)
    token_path().symlink_to(secret)
    assert _stored_token() is None
    token_path().unlink()
    token = api_token()
    assert _stored_token() == token


@pytest.mark.parametrize(
    "stored",
    [
        {"verify_s": []},
        {"verify_s": [float("nan")]},
        {"verify_s": [0.03, -1.0]},
        {"verify_s": [0.03], "draft_s": "abc"},
        {"verify_s": [0.03], "draft_s": float("inf")},
        {"verify_s": [0.03], "tie_noise": [float("nan")]},
    ],
)
def test_a_calibration_that_no_measurement_gives_is_none(stored: dict[str, object]) -> None:
    store = TunerStore()
    private_folder(store.calibration_file.parent)
    store.calibration_file.write_text(json.dumps({"machine": stored}))
    assert store.profile("machine") is None


def test_acceptance_counts_that_are_not_pairs_of_counts_are_dropped() -> None:
    store = TunerStore()
    good = [[3, 4], [1.5, 2.0]]
    odd = {"a": [[1]], "b": [[1, 2, 3]], "c": [["x", 1]], "d": [[float("nan"), 1]], "e": 5}
    private_folder(store.acceptance_file.parent)
    store.acceptance_file.write_text(json.dumps({"pair": {"ngram": good, **odd}}))
    model = store.acceptance("pair")
    assert model.counts == {"ngram": good}
    assert len(model.rates("ngram", 3)) == 3
