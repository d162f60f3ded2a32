"""Saved KV states: a restore is exact, a failed one leaves an empty, consistent context, and
the prompt cache keeps, picks and evicts states by llama-server's rules."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.errors import DecodeError
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.llama.prompt_cache import MIN_SAVED_TOKENS, PromptCache, SavedState, limit_bytes

TEXT = "the cat sat on the mat and then it went to sleep on the warm rug by the fire "


def _prompt(model: LlamaModel, text: str, length: int) -> list[int]:
    tokens = model.tokenize(text * (1 + length // 4))
    assert len(tokens) >= length
    return tokens[:length]


def _greedy(context: LlamaContext, last: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        last = int(np.argmax(context.decode([last], logits="last")[0]))
        out.append(last)
    return out


def _fresh_logits(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    with LlamaContext(model, 512, n_batch=64, n_threads=1) as fresh:
        fresh.prefill(tokens[:-1])
        logits: np.ndarray = fresh.decode(tokens[-1:], logits="last")[0]
        return logits


def test_a_restored_state_gives_the_same_logits_and_greedy_text(
    model: LlamaModel, context: LlamaContext
) -> None:
    prompt = _prompt(model, TEXT, 120)
    context.prefill(prompt[:-1])
    state = context.save_state()
    before = context.decode(prompt[-1:], logits="last")[0]
    text_before = _greedy(context, prompt[-1], 8)

    context.truncate(0)
    context.decode(_prompt(model, "a completely different file ", 90), logits="none")
    context.restore_state(state)

    assert list(context.tokens) == prompt[:-1]
    after = context.decode(prompt[-1:], logits="last")[0]
    assert np.array_equal(before, after)  # the same bytes in the same cells: exact
    context.truncate(len(prompt))
    assert _greedy(context, prompt[-1], 8) == text_before


@pytest.mark.parametrize("damage", ["truncated data", "wrong token count"])
def test_a_failed_restore_leaves_an_empty_consistent_context(
    model: LlamaModel, context: LlamaContext, damage: str
) -> None:
    prompt = _prompt(model, TEXT, 100)
    context.prefill(prompt)
    state = context.save_state()
    if damage == "truncated data":
        bad = SavedState(state.tokens, state.data[: state.size // 2])
    else:
        bad = SavedState(np.concatenate([state.tokens, state.tokens[:3]]), state.data)
    with pytest.raises(DecodeError, match="could not restore"):
        context.restore_state(bad)
    assert list(context.tokens) == []
    context.prefill(prompt[:-1])
    after = context.decode(prompt[-1:], logits="last")[0]
    assert np.array_equal(after, _fresh_logits(model, prompt))


def test_state_size_grows_with_the_tokens_cached(model: LlamaModel, context: LlamaContext) -> None:
    context.prefill(_prompt(model, TEXT, 100))
    hundred = context.save_state().size
    context.truncate(50)
    fifty = context.save_state().size
    # 2 layers x (K + V) x 2 KV heads x 16 dims x f16 = 256 bytes a token, plus cell metadata
    assert 256 * 50 <= hundred - fifty <= 300 * 50


def _cached(context: LlamaContext, tokens: list[int]) -> LlamaContext:
    context.truncate(0)
    context.prefill(tokens)
    return context


def test_the_cache_picks_the_longest_shared_prefix_and_hands_it_over(
    model: LlamaModel, context: LlamaContext
) -> None:
    cache = PromptCache(limit_bytes(64))
    first = _prompt(model, TEXT, 100)
    second = _prompt(model, "another file entirely ", 100)
    assert cache.save(_cached(context, first))
    assert cache.save(_cached(context, second))
    assert len(cache.entries) == 2

    wanted = first[:80] + second[:30]
    assert cache.best(wanted, current_reuse=80) is None  # no better than the cache
    state = cache.best(wanted, current_reuse=10)
    assert state is not None and list(state.tokens) == first
    assert [list(entry.tokens) for entry in cache.entries] == [second]
    # a prompt that keeps less than a quarter of a saved one does not trade it away
    assert cache.best(second[:20] + first, current_reuse=0) is None


def test_covered_prompts_are_saved_once_and_extended_ones_replaced(
    model: LlamaModel, context: LlamaContext
) -> None:
    cache = PromptCache(limit_bytes(64))
    prompt = _prompt(model, TEXT, 160)
    assert cache.save(_cached(context, prompt[:100]))
    assert not cache.save(_cached(context, prompt[:90]))  # the saved state covers it
    assert cache.save(_cached(context, prompt))
    assert [len(entry.tokens) for entry in cache.entries] == [160]
    assert not cache.save(_cached(context, prompt[: MIN_SAVED_TOKENS - 1]))


def test_the_oldest_states_go_first_over_the_byte_limit(
    model: LlamaModel, context: LlamaContext
) -> None:
    texts = ["first file ", "second file ", "third file "]
    sizes = []
    for text in texts:
        sizes.append(_cached(context, _prompt(model, text, 100)).save_state().size)
    cache = PromptCache(sizes[0] + sizes[1] + sizes[2] - 1)
    for text in texts:
        assert cache.save(_cached(context, _prompt(model, text, 100)))
    assert [list(entry.tokens) for entry in cache.entries] == [
        _prompt(model, text, 100) for text in texts[1:]
    ]
    assert cache.bytes == sizes[1] + sizes[2]
    assert not PromptCache(sizes[0] - 1).save(context)  # larger than the whole limit


def test_the_limit_is_capped_at_a_quarter_of_the_memory() -> None:
    assert limit_bytes(0) == 0
    assert limit_bytes(1) == 2**20
    assert limit_bytes(2**40) < 2**60  # a petabyte asked: a share of this machine's RAM
