"""Prompt states on disk: a long prompt processed by one context is restored by a new one (as
a restarted server's), exactly; files are private and bounded; damaged ones are dropped."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.llama.prefill import Prefilled
from localspec.llama.prompt_store import MAGIC, PromptStore, store_folder
from localspec.loading import RuntimeSettings, _prompt_store
from localspec.model_digest import memory_path, model_digest
from localspec.paths import cache_dir
from tests.tiny_models import TinySpec, write_tiny_model

TEXT = "the cat sat on the mat and then it went to sleep on the warm rug by the fire "
MIN_TOKENS = 64


def prompt_of(model: LlamaModel, text: str, length: int) -> list[int]:
    tokens = model.tokenize(text * (1 + length // 4))
    assert len(tokens) >= length
    return tokens[:length]


def context_with(model: LlamaModel, store: PromptStore | None) -> LlamaContext:
    return LlamaContext(model, 512, n_batch=64, n_threads=1, prompt_store=store)


def store_in(folder: Path, limit: int = 2**30) -> PromptStore:
    return PromptStore(folder, limit, MIN_TOKENS)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The store's own folder (tmp_path also holds the redirected user folders)."""
    return tmp_path / "prompts"


def test_a_new_context_restores_the_prefix_and_processes_the_rest(
    model: LlamaModel, folder: Path
) -> None:
    prefix = prompt_of(model, TEXT, 150)
    with context_with(model, store_in(folder)) as first:
        assert first.prefill(prefix).reused == 0
    files = list(folder.iterdir())
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    prompt = prefix + prompt_of(model, "a question about it ", 20)
    with context_with(model, store_in(folder)) as second:  # a restarted process
        prefilled, restored_row = second.prefill_logits(prompt)
        assert prefilled.reused == len(prefix) == prefilled.restored
    with context_with(model, None) as cold:
        cold_prefilled, cold_row = cold.prefill_logits(prompt)
    assert cold_prefilled.reused == 0
    assert restored_row is not None and cold_row is not None
    # the restored cells are the bytes the first context computed: the same logits as a
    # cold prefill up to the batch's own rounding, which is the same here (one batch size)
    assert np.allclose(restored_row, cold_row, atol=1e-4)


def test_short_prompts_and_small_additions_write_nothing(model: LlamaModel, folder: Path) -> None:
    store = store_in(folder)
    with context_with(model, store) as context:
        context.prefill(prompt_of(model, TEXT, MIN_TOKENS - 1))
        assert len(store) == 0
        prompt = prompt_of(model, TEXT, 100)
        context.prefill(prompt)
        assert len(store) == 1
        # fewer than half of min_tokens more: not worth another file
        context.prefill(prompt + prompt_of(model, "more ", MIN_TOKENS // 2 - 1))
        assert len(store) == 1
        longer = prompt + prompt_of(model, "more ", MIN_TOKENS)
        context.prefill(longer)
    # the longer state extends the first, which is deleted
    assert len(store) == 1 and len(list(folder.iterdir())) == 1
    assert store.covers(longer)


def test_the_store_stays_within_its_bytes(model: LlamaModel, folder: Path) -> None:
    with context_with(model, store_in(folder)) as context:
        context.prefill(prompt_of(model, TEXT, 100))
    one_file = next(folder.iterdir()).stat().st_size
    store = store_in(folder, limit=int(2.5 * one_file))
    texts = ["first file ", "second file ", "third file ", "fourth file "]
    with context_with(model, store) as context:
        for text in texts:
            context.prefill(prompt_of(model, text, 100))
    assert len(store) == 2 and store.bytes <= store.limit_bytes
    assert sum(path.stat().st_size for path in folder.iterdir()) == store.bytes
    # the least recently used went first: the last two remain
    assert store.covers(prompt_of(model, texts[-1], 100))
    assert store.covers(prompt_of(model, texts[-2], 100))
    assert not store.covers(prompt_of(model, texts[0], 100))


def test_a_prompt_processed_afresh_restores_nothing(model: LlamaModel, folder: Path) -> None:
    prefix = prompt_of(model, TEXT, 150)
    with context_with(model, store_in(folder)) as first:
        first.prefill(prefix)
    with context_with(model, store_in(folder)) as second:
        assert second.prefill([*prefix, 5, 6], restore=False) == Prefilled(0)


@pytest.mark.parametrize("damage", ["cut short", "not a state"])
def test_damaged_files_are_dropped(model: LlamaModel, folder: Path, damage: str) -> None:
    prefix = prompt_of(model, TEXT, 150)
    with context_with(model, store_in(folder)) as first:
        first.prefill(prefix)
    path = next(folder.iterdir())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "cut short" else b"hello" + data[5:])
    store = store_in(folder)
    with context_with(model, store) as second:
        assert second.prefill([*prefix, 5, 6]).reused == 0  # processed in full, no error
    assert not path.exists()
    # what was processed instead is stored in its place
    assert len(store) == 1 and store.covers([*prefix, 5, 6])


def test_states_belong_to_the_model_files_content(model: LlamaModel, tmp_path: Path) -> None:
    """A file replaced in place by another model of the same size, its time kept (`cp -p`,
    `rsync -a`), gets other states; a copy of the same model shares them."""
    target = Path(model.path)
    digest = model_digest(target)
    assert store_folder(tmp_path, digest, None) != store_folder(tmp_path, digest, True)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(target.read_bytes())
    assert model_digest(copy) == digest
    info = copy.stat()
    other = write_tiny_model(tmp_path / "other.gguf", TinySpec(seed=1)).read_bytes()
    assert len(other) == info.st_size
    with copy.open("r+b") as handle:  # in place: the same inode, size and (below) time
        handle.write(other)
    os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert copy.stat().st_mtime_ns == info.st_mtime_ns
    assert model_digest(copy) != digest
    assert json.loads(memory_path().read_text())[str(copy)]["sha256"] == model_digest(copy)
    assert stat.S_IMODE(memory_path().stat().st_mode) == 0o600


def test_a_flipped_bit_is_refused_not_restored(model: LlamaModel, folder: Path) -> None:
    prefix = prompt_of(model, TEXT, 150)
    with context_with(model, store_in(folder)) as first:
        first.prefill(prefix)
    path = next(folder.iterdir())
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10  # in llama.cpp's state, past the tokens
    path.write_bytes(bytes(data))
    with context_with(model, store_in(folder)) as second:
        assert second.prefill([*prefix, 5, 6]) == Prefilled(0)
    assert not path.exists()


@pytest.mark.parametrize("count", [2**63, 2**40, 2**64 - 1, 0])
def test_a_count_larger_than_its_file_is_deleted_before_anything_is_allocated(
    folder: Path, count: int, caplog: pytest.LogCaptureFixture
) -> None:
    folder.mkdir(mode=0o700)
    state = folder / f"{'ab' * 16}.kv"
    state.write_bytes(MAGIC + count.to_bytes(8, "little") + bytes(32 + 64))
    with caplog.at_level(logging.WARNING, logger="localspec.llama.prompt_store"):
        store = store_in(folder)
    assert len(store) == 0 and not state.exists()
    assert [r for r in caplog.records if f"a count of {count} tokens" in r.getMessage()]


def test_what_is_not_a_file_of_ours_is_passed_over(folder: Path, tmp_path: Path) -> None:
    folder.mkdir(mode=0o700)
    (folder / f".{'ab' * 16}.kv.123.tmp").mkdir()  # a folder named like a leftover
    (folder / f"{'cd' * 16}.kv").mkdir()
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    (folder / f"{'ef' * 16}.kv").symlink_to(elsewhere)
    assert len(store_in(folder)) == 0
    assert (folder / f".{'ab' * 16}.kv.123.tmp").is_dir()
    assert elsewhere.read_text() == "someone's notes"


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_store_folder_of_another_user_leaves_the_server_without_a_store(
    tiny_target: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prompts = cache_dir() / "prompts"
    prompts.mkdir(parents=True, mode=0o700)
    os.chown(prompts, 4242, -1)
    settings = RuntimeSettings(target=tiny_target, cache_disk_mib=16)
    with caplog.at_level(logging.WARNING, logger="localspec.loading"):
        assert _prompt_store(settings, None) is None
    assert [r for r in caplog.records if "belongs to uid 4242" in r.getMessage()]
    os.chown(prompts, os.getuid(), -1)
    assert _prompt_store(settings, None) is not None


def test_a_file_grown_since_it_was_listed_is_not_read(model: LlamaModel, folder: Path) -> None:
    """No more than the store's limit is ever read: the size listed is the size restored."""
    prefix = prompt_of(model, TEXT, 150)
    with context_with(model, store_in(folder)) as first:
        first.prefill(prefix)
    store = store_in(folder)
    path = next(folder.iterdir())
    with path.open("r+b") as handle:  # sparse: a terabyte no allocation could hold
        handle.truncate(2**40)
    with context_with(model, store) as second:
        assert second.prefill([*prefix, 5, 6]).reused == 0
    assert not path.exists()
