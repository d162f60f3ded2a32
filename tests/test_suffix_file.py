"""The suffix store's file: kept across processes, private, bounded, and never fatal."""

import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from localspec.paths import state_dir
from localspec.speculative.suffix import BLOCK, SuffixStore
from localspec.suffix_file import MAGIC, _record, default_store_path, open_store

N_VOCAB = 50_000  # above every id the tests store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_store_comes_back_in_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    first = SuffixStore(max_tokens=4096)
    open_store(path, first, n_vocab=N_VOCAB)
    assert path.read_bytes() == MAGIC and _mode(path) == 0o600
    first.add(list(range(1000, 1100)))
    first.add(list(range(2000, 2100)))
    again = SuffixStore(max_tokens=4096)
    open_store(path, again, n_vocab=N_VOCAB)
    assert again.texts == first.texts
    assert again.lookup([7, 1000, 1001, 1002, 1003], max_len=3).tokens == [1004, 1005, 1006]
    assert _mode(path) == 0o600


def test_the_file_is_rewritten_to_what_the_store_keeps_at_twice_its_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.bin"
    writer = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, writer, n_vocab=N_VOCAB)
    for i in range(40):  # 40 texts of one block each: four times the bound
        writer.add(list(range(i * 1000, i * 1000 + BLOCK)))
        # rewritten as it grows: never more than twice what the store keeps, and a header
        assert path.stat().st_size <= len(MAGIC) + 4 * (2 * 10 * BLOCK + 2 * 20)
    reader = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, reader, n_vocab=N_VOCAB)
    assert reader.texts == writer.texts
    reopened = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, reopened, n_vocab=N_VOCAB)
    assert reopened.texts == writer.texts


def test_a_file_that_is_not_a_store_is_set_aside_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.bin"
    for attempt in range(2):  # a second one does not replace the first set aside
        path.write_bytes(b"not a store %d" % attempt)
        store = SuffixStore()
        with caplog.at_level(logging.WARNING, logger="localspec.suffix_file"):
            open_store(path, store, n_vocab=N_VOCAB)
        assert len(store) == 0
        assert path.read_bytes() == MAGIC  # a fresh store in its place
    aside = sorted(tmp_path.glob("store.*.unreadable"))
    assert [p.read_bytes() for p in aside] == [b"not a store 0", b"not a store 1"]  # kept
    assert all("set aside" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("tail", [b"\x01\x02\x03", b"\x09\x00\x00\x00\x01\x00\x00\x00"])
def test_a_write_cut_short_loses_only_its_own_record(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "store.bin"
    writer = SuffixStore()
    open_store(path, writer, n_vocab=N_VOCAB)
    writer.add(list(range(1000, 1100)))
    whole = path.read_bytes()
    path.write_bytes(whole + tail)  # a process died while appending
    reader = SuffixStore()
    open_store(path, reader, n_vocab=N_VOCAB)
    assert reader.texts == writer.texts
    assert path.read_bytes() == whole


def test_a_file_removed_meanwhile_is_written_whole_again(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    store = SuffixStore()
    open_store(path, store, n_vocab=N_VOCAB)
    store.add(list(range(1000, 1100)))
    path.unlink()  # the user removed it, or another process set it aside
    store.add(list(range(2000, 2100)))
    again = SuffixStore()
    open_store(path, again, n_vocab=N_VOCAB)
    assert again.texts == store.texts


def test_the_default_store_is_per_project_and_model_in_a_private_folder(tmp_path: Path) -> None:
    model, other_model = tmp_path / "a.gguf", tmp_path / "b.gguf"
    model.write_bytes(b"x")
    other_model.write_bytes(b"yy")
    here = default_store_path(model, tmp_path / "one")
    assert here.parent == state_dir() / "suffix"
    assert _mode(here.parent) == 0o700
    assert here == default_store_path(model, tmp_path / "one")
    assert here != default_store_path(model, tmp_path / "two")
    assert here != default_store_path(other_model, tmp_path / "one")


def test_records_with_ids_outside_the_vocabulary_are_dropped_from_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An id llama.cpp does not know would fail every request whose prompt matches it."""
    path = tmp_path / "store.bin"
    good = list(range(100, 200))
    bad = [[*range(300, 350), 9_999_999], [2**31 + 5, *range(400, 450)], [2**32 - 1] * 40]
    path.write_bytes(MAGIC + b"".join(_record(text) for text in [good, *bad]))
    store = SuffixStore()
    with caplog.at_level(logging.WARNING, logger="localspec.suffix_file"):
        open_store(path, store, n_vocab=1000)
    assert store.texts == [good]
    assert [r.getMessage() for r in caplog.records if "3 records" in r.getMessage()]
    again = SuffixStore()
    open_store(path, again, n_vocab=1000)
    assert again.texts == [good]  # rewritten without them: no warning next time
    assert len([r for r in caplog.records if "outside" in r.getMessage()]) == 1


def test_a_path_that_is_not_a_regular_file_of_ours_keeps_the_store_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO would block the read for ever (a thread joins it: a hang guard); a hard link
    is another file's name."""
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_bytes(MAGIC)
    hard = tmp_path / "hard.bin"
    os.link(elsewhere, hard)
    for path in (fifo, hard):
        store = SuffixStore()
        with caplog.at_level(logging.WARNING, logger="localspec.suffix_file"):
            opening = threading.Thread(target=open_store, args=(path, store), kwargs={"n_vocab": 9})
            opening.start()
            opening.join(timeout=30)
        assert not opening.is_alive(), f"open_store blocked on {path.name}"
        assert store.on_store is None  # in memory only
    assert len([r for r in caplog.records if "not a regular file of yours" in r.getMessage()]) == 2
    assert elsewhere.read_bytes() == MAGIC


def test_only_what_the_bound_lets_the_file_hold_is_read(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    text = list(range(BLOCK))
    path.write_bytes(MAGIC + _record(text) * 10_000)  # 10,000 blocks for a store of 10
    store = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, store, n_vocab=N_VOCAB)
    assert path.stat().st_size <= len(MAGIC) + 4 * 2 * (2 * 10 * BLOCK + 1)
