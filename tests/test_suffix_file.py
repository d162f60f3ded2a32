"""The suffix store's file: kept across processes, private, bounded, and never fatal."""

import logging
import stat
from pathlib import Path

import pytest

from localspec.paths import state_dir
from localspec.speculative.suffix import BLOCK, SuffixStore
from localspec.suffix_file import MAGIC, default_store_path, open_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_store_comes_back_in_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    first = SuffixStore(max_tokens=4096)
    open_store(path, first)
    assert path.read_bytes() == MAGIC and _mode(path) == 0o600
    first.add(list(range(1000, 1100)))
    first.add(list(range(2000, 2100)))
    again = SuffixStore(max_tokens=4096)
    open_store(path, again)
    assert again.texts == first.texts
    assert again.lookup([7, 1000, 1001, 1002, 1003], max_len=3).tokens == [1004, 1005, 1006]
    assert _mode(path) == 0o600


def test_the_file_is_rewritten_to_what_the_store_keeps_at_twice_its_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.bin"
    writer = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, writer)
    for i in range(40):  # 40 texts of one block each: four times the bound
        writer.add(list(range(i * 1000, i * 1000 + BLOCK)))
        # rewritten as it grows: never more than twice what the store keeps, and a header
        assert path.stat().st_size <= len(MAGIC) + 4 * (2 * 10 * BLOCK + 2 * 20)
    reader = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, reader)
    assert reader.texts == writer.texts
    reopened = SuffixStore(max_tokens=10 * BLOCK)
    open_store(path, reopened)
    assert reopened.texts == writer.texts


def test_a_file_that_is_not_a_store_is_set_aside_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.bin"
    for attempt in range(2):  # a second one does not replace the first set aside
        path.write_bytes(b"not a store %d" % attempt)
        store = SuffixStore()
        with caplog.at_level(logging.WARNING, logger="localspec.suffix_file"):
            open_store(path, store)
        assert len(store) == 0
        assert path.read_bytes() == MAGIC  # a fresh store in its place
    aside = sorted(tmp_path.glob("store.*.unreadable"))
    assert [p.read_bytes() for p in aside] == [b"not a store 0", b"not a store 1"]  # kept
    assert all("set aside" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("tail", [b"\x01\x02\x03", b"\x09\x00\x00\x00\x01\x00\x00\x00"])
def test_a_write_cut_short_loses_only_its_own_record(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "store.bin"
    writer = SuffixStore()
    open_store(path, writer)
    writer.add(list(range(1000, 1100)))
    whole = path.read_bytes()
    path.write_bytes(whole + tail)  # a process died while appending
    reader = SuffixStore()
    open_store(path, reader)
    assert reader.texts == writer.texts
    assert path.read_bytes() == whole


def test_a_file_removed_meanwhile_is_written_whole_again(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    store = SuffixStore()
    open_store(path, store)
    store.add(list(range(1000, 1100)))
    path.unlink()  # the user removed it, or another process set it aside
    store.add(list(range(2000, 2100)))
    again = SuffixStore()
    open_store(path, again)
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
