"""Tokens a prompt leaves behind are parked in sequence 1 and taken back by a later prompt,
on the tiny f32 model (`localspec.llama.parked`).

Exactness, measured two ways. A parked chunk taken back to the positions it had gives a
cold prefill's logits: its cells are the same cells. A chunk taken back after tokens were
inserted before it gives the logits of a reference that computed it at its new positions
without seeing the insertion (sequence 1 of a raw context): its keys are re-rotated, its
values are what they were, as a shifted chunk's are (to the rounding of keys re-rotated in
the f16 cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp.llama_cpp as lc
import numpy as np
import pytest

from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.model import LlamaModel
from tests.llama.helpers import random_tokens, small_context
from tests.llama.test_context import F32_TOLERANCE

N = 32  # the reuse threshold in these tests
# re-rotating keys held in the f16 KV cache rounds them again: 0.006 here, against 0.7 for
# what the chunk would have been had it seen the insertion (a cold prefill)
ROTATED_TOLERANCE = 0.02


def _sequence(context: LlamaContext, seq: int) -> tuple[int, int]:
    memory = lc.llama_get_memory(context.handle)
    return int(lc.llama_memory_seq_pos_min(memory, seq)), int(
        lc.llama_memory_seq_pos_max(memory, seq)
    )


def _check_cells(context: LlamaContext) -> None:
    """Between prefills sequence 0 holds the token list at 0..n-1 and nothing else is in the
    cache: parked tokens are stowed in host memory, not left in cells every decode walks."""
    assert _sequence(context, 0) == ((0, context.n_past - 1) if context.n_past else (-1, -1))
    assert _sequence(context, 1) == (-1, -1) and _sequence(context, 2) == (-1, -1)
    assert not context.parked.in_cache
    assert (context.parked.stowed_bytes > 0) == bool(context.parked)


def _last_logits(context: LlamaContext, tokens: Sequence[int]) -> Logits:
    row: Logits = context.decode(tokens, logits="last")[0]
    return row


def test_a_left_behind_tail_is_parked_and_taken_back_exactly(
    model: LlamaModel, context: LlamaContext
) -> None:
    """The warm-up's case with the new chunk where the window was: the window is parked,
    then a prompt that has it at the same place again takes it back, as a cold prefill."""
    head, window, new = random_tokens(1, 10), random_tokens(2, 3 * N), random_tokens(3, 8)
    context.prefill(head + window)
    assert context.prefill(head + new, reuse_min=N).reused == len(head)
    assert list(context.tokens) == head + new and context.parked.tokens == window
    _check_cells(context)
    tail = random_tokens(4, 5)
    prefilled = context.prefill(head + window, reuse_min=N)
    assert prefilled.reused == len(head) + len(window)
    assert prefilled.shifted == len(window) and not context.parked
    _check_cells(context)
    warm = _last_logits(context, tail)
    with small_context(model) as cold:
        fresh = _last_logits(cold, head + window + tail)
    assert np.max(np.abs(warm - fresh)) < F32_TOLERANCE


def _decode_in(context: LlamaContext, tokens: Sequence[int], seq: int, first: int) -> None:
    """Decode `tokens` into sequence `seq` at positions from `first` (raw llama.cpp)."""
    batch = lc.llama_batch_init(context.n_batch, 0, 1)
    try:
        for start in range(0, len(tokens), context.n_batch):
            chunk = tokens[start : start + context.n_batch]
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i] = token, first + start + i
                batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = 1, seq, False
            batch.n_tokens = len(chunk)
            assert lc.llama_decode(context.handle, batch) == 0
    finally:
        lc.llama_batch_free(batch)


def test_a_chunk_taken_back_after_an_insertion_keeps_what_it_was_computed_with(
    model: LlamaModel, context: LlamaContext
) -> None:
    """llama.vim's warm-up, then its next completion: the window was computed alone, the
    new chunk goes in front of it, and the window moves forward past it."""
    window, inserted, tail = random_tokens(2, 3 * N), random_tokens(3, 20), random_tokens(4, 5)
    context.prefill(window)
    assert context.prefill(inserted, reuse_min=N).reused == 0  # the warm-up: the window is parked
    assert context.parked.tokens == window
    assert context.prefill(inserted + window, reuse_min=N).reused == len(inserted) + len(window)
    _check_cells(context)
    moved = _last_logits(context, tail)
    with small_context(model) as reference:
        _decode_in(reference, inserted, 0, 0)
        _decode_in(reference, window, 1, len(inserted))  # at its new place, not seeing it
        memory = lc.llama_get_memory(reference.handle)
        end = len(inserted) + len(window)
        lc.llama_memory_seq_cp(memory, 1, 0, len(inserted), end)
        lc.llama_memory_seq_rm(memory, 1, -1, -1)
        _decode_in(reference, tail[:-1], 0, end)
        array = (lc.llama_token * 1)(tail[-1])
        assert lc.llama_decode(reference.handle, lc.llama_batch_get_one(array, 1)) == 0
        row = lc.llama_get_logits_ith(reference.handle, -1)
        expected = np.ctypeslib.as_array(row, shape=(model.n_vocab,)).copy()
    assert np.max(np.abs(moved - expected)) < ROTATED_TOLERANCE
    with small_context(model) as cold:  # and that is not what a cold prefill gives
        fresh = _last_logits(cold, inserted + window + tail)
    assert np.max(np.abs(moved - fresh)) > 10 * F32_TOLERANCE


def test_two_runs_are_taken_back_from_one_parked_copy(context: LlamaContext) -> None:
    """A prompt that wants two runs of the parked tokens, with parked tokens between them
    (found by the server fuzz: the second take read its run at the index it had before the
    first take trimmed the parked tokens, and sequence 0 was left with a gap)."""
    a, b, c = random_tokens(5, 2 * N), random_tokens(6, 2 * N), random_tokens(7, 2 * N)
    context.prefill(a + b + c)
    other = random_tokens(8, 10)
    assert context.prefill(other, reuse_min=N).reused == 0
    assert context.parked.tokens == a + b + c
    tail = random_tokens(9, 3)
    assert context.prefill(a + c + tail, reuse_min=N).reused == len(a) + len(c)
    assert list(context.tokens) == a + c + tail
    _check_cells(context)
    assert _last_logits(context, random_tokens(10, 2)).shape == (context.model.n_vocab,)


def test_a_tail_shorter_than_n_is_dropped(context: LlamaContext) -> None:
    head = random_tokens(1, 10)
    context.prefill(head + random_tokens(2, N - 1))
    context.prefill(head + random_tokens(3, 4), reuse_min=N)
    assert not context.parked
    _check_cells(context)


def test_without_reuse_nothing_is_parked(context: LlamaContext) -> None:
    head = random_tokens(1, 10)
    context.prefill(head + random_tokens(2, 3 * N))
    context.prefill(head + random_tokens(3, 4))
    assert not context.parked
    _check_cells(context)


def test_stowed_tokens_take_no_cells_and_come_back_where_there_is_room(
    context: LlamaContext,
) -> None:
    """A stowed copy is host memory: a prompt that, with the parked tokens in the cache,
    would not fit the 512 cells is processed beside it, and the copy is taken back later,
    once the cache's old tail is dropped."""
    head, window = random_tokens(1, 10), random_tokens(2, 300)
    context.prefill(head + window)
    context.prefill(head + random_tokens(3, 4), reuse_min=N)
    assert context.parked.tokens == window
    long = head + random_tokens(5, 400)  # with the parked 300, more than the 512 cells
    assert context.prefill(long, reuse_min=N).reused == len(head)
    assert list(context.tokens) == long and context.parked.tokens == window
    _check_cells(context)
    assert context.prefill(head + window, reuse_min=N).reused == len(head) + len(window)
    assert list(context.tokens) == head + window and not context.parked
    _check_cells(context)


def test_a_stowed_copy_does_not_fit_where_the_prompt_needs_the_room(
    context: LlamaContext,
) -> None:
    head, window = random_tokens(1, 10), random_tokens(2, 300)
    context.prefill(head + window)
    context.prefill(head + random_tokens(3, 4), reuse_min=N)
    long = head + random_tokens(5, 300)
    context.prefill(long, reuse_min=N)
    prompt = long + window  # 610 tokens do not fit: llama.cpp is never asked to
    assert context.prefill(prompt[:500], reuse_min=N).reused == len(long)
    assert list(context.tokens) == prompt[:500] and not context.parked
    _check_cells(context)


def test_a_restored_state_keeps_the_stowed_tokens(context: LlamaContext) -> None:
    head, window = random_tokens(1, 10), random_tokens(2, 3 * N)
    context.prefill(head + window)
    saved = context.save_state()
    context.prefill(head + random_tokens(3, 4), reuse_min=N)
    assert context.parked.tokens == window
    context.restore_state(saved)
    assert list(context.tokens) == head + window and context.parked.tokens == window
    _check_cells(context)


def test_after_an_edited_line_the_rest_is_processed_again(context: LlamaContext) -> None:
    """A run after new tokens is not taken back (see `localspec.llama.parked`): the suffix
    after an edited line must see the edit. It stays parked, for a prompt that has it after
    reused tokens."""
    head, old, suffix, tail = (
        random_tokens(1, 20),
        random_tokens(2, 6),
        random_tokens(3, 3 * N),
        random_tokens(5, 4),
    )
    context.prefill(head + old + suffix)
    prompt = head + random_tokens(6, 9) + suffix + tail
    prefilled, row = context.prefill_logits(prompt, reuse_min=N)
    assert prefilled.reused == len(head) and prefilled.shifted == 0 and row is not None
    assert list(context.tokens) == prompt and context.parked.tokens == old + suffix
    _check_cells(context)


def test_a_prompt_cache_restore_that_gains_less_than_a_chunk_keeps_the_tail_parked(
    model: LlamaModel,
) -> None:
    """Restoring a saved state replaces the cache, and its tail with it; a state that offers
    a few tokens more than the cache is not worth the window the tail would have parked."""
    head, shared, window = random_tokens(1, 10), random_tokens(2, 30), random_tokens(3, 3 * N)
    with LlamaContext(model, 512, n_batch=64, n_threads=1, prompt_cache_bytes=2**22) as context:
        context.prefill(head + shared + random_tokens(4, 60))
        context.prefill(head + window)  # keeps under half: the first prompt's state is saved
        assert context.reuse.cache is not None and context.reuse.cache.entries
        warm_up = head + shared + random_tokens(5, 5)  # 30 tokens more from the saved state
        assert context.prefill(warm_up, reuse_min=N).restored == 0
        assert context.parked.tokens == window
        assert context.prefill(warm_up + window, reuse_min=N).reused == len(warm_up) + len(window)
        _check_cells(context)


def test_no_parked_cell_is_in_the_cache_while_the_prompt_is_processed(
    context: LlamaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attention walks every cell up to the highest in use, masked or not: parked cells go
    to host memory before the prompt's tokens are decoded, not after."""
    head, window = random_tokens(1, 10), random_tokens(2, 3 * N)
    context.prefill(head + window)
    seen: list[tuple[bool, tuple[int, int]]] = []
    decode = context.decode

    def watched(tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        seen.append((context.parked.in_cache, _sequence(context, 1)))
        return decode(tokens, logits=logits)

    monkeypatch.setattr(context, "decode", watched)
    prefilled, row = context.prefill_logits(head + random_tokens(3, 150), reuse_min=N)
    assert prefilled.reused == len(head) and row is not None and context.parked.tokens == window
    # one decode per batch of the 150 new tokens (64 a batch), none with a parked cell
    assert seen == [(False, (-1, -1))] * 3
    _check_cells(context)


def test_a_parked_chunk_whose_shift_no_decode_applied_is_stowed_re_rotated(
    model: LlamaModel, context: LlamaContext
) -> None:
    """A prefill that reuses every token by shifting decodes nothing, so its shift is still
    pending when the next prefill parks the shifted chunk; the stowed copy must hold its keys
    re-rotated, or taking it back gives keys rotated for positions it no longer has."""
    head, gap, chunk, tail = (
        random_tokens(1, 10),
        random_tokens(2, 20),
        random_tokens(3, 3 * N),
        random_tokens(4, 5),
    )
    context.prefill(head + gap + chunk)
    prefilled = context.prefill(head + chunk, reuse_min=N)
    assert prefilled.reused == len(head) + len(chunk)
    assert prefilled.shifted == len(chunk)  # nothing decoded: the shift is pending
    context.prefill(head + random_tokens(5, 8), reuse_min=N)
    assert context.parked.tokens == chunk
    _check_cells(context)
    assert context.prefill(head + chunk, reuse_min=N).reused == len(head) + len(chunk)
    taken_back = _last_logits(context, tail)
    with small_context(model) as reference:  # the same shift, never parked
        reference.prefill(head + gap + chunk)
        assert reference.prefill(head + chunk, reuse_min=N).reused == len(head) + len(chunk)
        shifted = _last_logits(reference, tail)
    assert np.max(np.abs(taken_back - shifted)) < F32_TOLERANCE
