"""Prompt states on disk: a long prompt processed by one context is restored by a new one (as
a restarted server's), exactly; files are private and bounded; damaged ones are dropped."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.llama.prompt_store import PromptStore, store_folder

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
        assert first.prefill(prefix) == 0
    files = list(folder.iterdir())
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    prompt = prefix + prompt_of(model, "a question about it ", 20)
    with context_with(model, store_in(folder)) as second:  # a restarted process
        reused, restored_row = second.prefill_logits(prompt)
        assert reused == len(prefix) == second.last_restored
    with context_with(model, None) as cold:
        cold_reused, cold_row = cold.prefill_logits(prompt)
    assert cold_reused == 0
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
        assert second.prefill([*prefix, 5, 6], restore=False) == 0
        assert second.last_restored == 0


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
        assert second.prefill([*prefix, 5, 6]) == 0  # processed in full, no error
    assert not path.exists()
    # what was processed instead is stored in its place
    assert len(store) == 1 and store.covers([*prefix, 5, 6])


def test_states_of_another_model_file_live_apart(model: LlamaModel, tmp_path: Path) -> None:
    target = Path(model.path)
    assert store_folder(tmp_path, target, None) != store_folder(tmp_path, target, True)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(target.read_bytes())
    assert store_folder(tmp_path, target, None) != store_folder(tmp_path, copy, None)
