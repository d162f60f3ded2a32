"""N-gram index, cache and proposer, checked on plain token arrays against brute force."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.ngram import Key, NGramCache, NGramIndex, NGramProposer
from localspec.speculative.proposer import DraftLimits, Proposer
from localspec.speculative.sampling import Sampler, SamplingSettings


def reference_lookup(
    tokens: Sequence[int], n_min: int, n_max: int, max_len: int
) -> tuple[list[int], int]:
    """The lookup's contract by rescanning everything: slow, obviously right."""
    seq = list(tokens)
    size = len(seq)
    if max_len <= 0:
        return [], 0
    for n in range(min(n_max, size), n_min - 1, -1):
        suffix = seq[size - n :]
        for end in range(size - 2, n - 2, -1):
            if seq[end - n + 1 : end + 1] == suffix:
                return seq[end + 1 : min(end + 1 + max_len, size)], n
    return [], 0


def expected_entries(size: int, n_min: int, n_max: int) -> int:
    return sum(1 for t in range(size) for n in range(n_min, n_max + 1) if n <= t + 1)


def built(tokens: Sequence[int], n_min: int = 2, n_max: int = 4) -> NGramIndex:
    index = NGramIndex(n_min, n_max)
    index.extend(tokens)
    return index


class CountingIndex(NGramIndex):
    """Counts the positions whose n-grams get (re)computed, to show nothing is rescanned."""

    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        super().__init__(n_min, n_max)
        self.positions_visited = 0

    def _keys_ending_at(self, t: int) -> list[Key]:
        self.positions_visited += 1
        return super()._keys_ending_at(t)


def sampler() -> Sampler:
    return Sampler(SamplingSettings(), np.random.default_rng(0))


# --- NGramIndex -------------------------------------------------------------------------------


def test_lookup_prefers_the_longest_match() -> None:
    # the 2-gram (2, 3) last occurred before 7, but the 3-gram (1, 2, 3) only before 4
    index = built([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3])
    assert index.lookup(2) == ([4, 5], 3)


def test_lookup_prefers_the_most_recent_occurrence() -> None:
    index = built([5, 6, 1, 0, 5, 6, 2, 3, 5, 6])
    assert index.lookup(1) == ([2], 2)
    assert index.lookup(3) == ([2, 3, 5], 2)


def test_lookup_clips_at_max_len_and_at_the_sequence_end() -> None:
    index = built([1, 2, 3, 4, 5, 6, 1, 2])
    assert index.lookup(3) == ([3, 4, 5], 2)
    assert index.lookup(100) == ([3, 4, 5, 6, 1, 2], 2)
    # the only earlier occurrence ends just before the suffix: one token follows it
    near_end = built([9, 1, 2, 1, 2])
    assert near_end.lookup(5) == ([1, 2], 2)
    repeated = built([7, 7, 7, 7])
    assert repeated.lookup(5) == ([7], 3)


def test_lookup_never_matches_the_suffix_itself() -> None:
    assert built([1, 2, 3, 4]).lookup(4) == ([], 0)
    assert built([1, 2]).lookup(4) == ([], 0)
    assert built([]).lookup(4) == ([], 0)
    assert built([3]).lookup(4) == ([], 0)


def test_lookup_with_no_budget_is_empty() -> None:
    index = built([1, 2, 3, 1, 2])
    assert index.lookup(0) == ([], 0)
    assert index.lookup(-3) == ([], 0)
    assert index.lookup(1) == ([3], 2)


def test_n_min_bounds_the_shortest_match() -> None:
    tokens = [4, 1, 9, 4]
    assert built(tokens, n_min=1, n_max=3).lookup(2) == ([1, 9], 1)
    assert built(tokens, n_min=2, n_max=3).lookup(2) == ([], 0)


def test_invalid_sizes_are_rejected() -> None:
    with pytest.raises(InvalidSettingsError):
        NGramIndex(0, 3)
    with pytest.raises(InvalidSettingsError):
        NGramIndex(3, 2)


def test_lookup_matches_brute_force_on_random_sequences() -> None:
    rng = np.random.default_rng(1234)
    for _ in range(200):
        n_min = int(rng.integers(1, 4))
        n_max = n_min + int(rng.integers(0, 4))
        vocab = int(rng.integers(2, 8))
        tokens = [int(x) for x in rng.integers(0, vocab, size=int(rng.integers(0, 60)))]
        index = NGramIndex(n_min, n_max)
        for i, token in enumerate(tokens):
            index.extend([token])
            max_len = int(rng.integers(0, 10))
            assert index.lookup(max_len) == reference_lookup(tokens[: i + 1], n_min, n_max, max_len)


def test_truncate_then_extend_equals_building_from_scratch() -> None:
    rng = np.random.default_rng(42)
    for _ in range(100):
        n_min = int(rng.integers(1, 3))
        n_max = n_min + int(rng.integers(0, 4))
        vocab = int(rng.integers(2, 6))
        index = NGramIndex(n_min, n_max)
        current: list[int] = []
        for _ in range(30):
            if current and rng.random() < 0.4:
                keep = int(rng.integers(0, len(current) + 1))
                index.truncate(keep)
                current = current[:keep]
            else:
                new = [int(x) for x in rng.integers(0, vocab, size=int(rng.integers(1, 12)))]
                index.extend(new)
                current += new
            fresh = built(current, n_min, n_max)
            assert list(index.tokens) == current
            assert len(index) == len(current)
            assert index.entries == fresh.entries == expected_entries(len(current), n_min, n_max)
            for max_len in (1, 3, 8):
                expected = reference_lookup(current, n_min, n_max, max_len)
                assert index.lookup(max_len) == fresh.lookup(max_len) == expected


def test_truncate_beyond_the_end_or_below_zero() -> None:
    index = built([1, 2, 3, 1, 2])
    index.truncate(10)
    assert list(index.tokens) == [1, 2, 3, 1, 2]
    index.truncate(-1)
    assert len(index) == 0
    assert index.entries == 0
    index.extend([1, 2, 3, 1, 2])
    assert index.lookup(3) == ([3, 1, 2], 2)


def test_extending_one_token_at_a_time_never_rescans() -> None:
    rng = np.random.default_rng(7)
    tokens = [int(x) for x in rng.integers(0, 50, size=20_000)]
    index = CountingIndex(2, 4)
    for token in tokens:
        index.extend([token])
    # one visit per appended position: indexing is incremental, not a rescan (which would be
    # ~2e8 n-gram builds here); counted, not timed
    assert index.positions_visited == len(tokens)
    assert index.entries == expected_entries(len(tokens), 2, 4)
    index.positions_visited = 0
    index.truncate(19_990)
    assert index.positions_visited == 10
    assert index.entries == expected_entries(19_990, 2, 4)


# --- NGramCache -------------------------------------------------------------------------------


def test_cache_learns_followers_and_drafts_a_chain() -> None:
    cache = NGramCache(n=2, min_count=2)
    cache.learn([1, 2, 3, 4, 5])
    cache.learn([1, 2, 3, 4, 6])
    assert cache.counts([1, 2]) == {3: 2}
    assert cache.counts([3, 4]) == {5: 1, 6: 1}
    # (3, 4) was followed by 5 once and 6 once: below min_count, so the chain stops there
    assert cache.draft([9, 1, 2], 10) == [3, 4]
    assert cache.draft([9, 1, 2], 1) == [3]
    assert cache.draft([9, 1, 2], 0) == []


def test_cache_respects_min_count() -> None:
    cache = NGramCache(n=2, min_count=3)
    cache.learn([1, 2, 3])
    cache.learn([1, 2, 3])
    assert cache.draft([1, 2], 4) == []
    cache.learn([1, 2, 3])
    assert cache.draft([1, 2], 4) == [3]
    assert NGramCache(n=2, min_count=1).draft([1, 2], 4) == []


def test_cache_takes_the_most_frequent_follower_and_breaks_ties_by_id() -> None:
    cache = NGramCache(n=1, min_count=1)
    cache.learn([5, 9, 5, 9, 5, 7])
    # 5 -> 9 twice, 5 -> 7 once; 9 -> 5 twice
    assert cache.draft([5], 3) == [9, 5, 9]
    tied = NGramCache(n=1, min_count=1)
    tied.learn([5, 8, 5, 3])
    assert tied.draft([5], 1) == [3]


def test_cache_needs_a_full_key_of_context() -> None:
    cache = NGramCache(n=3, min_count=1)
    cache.learn([1, 2, 3, 4])
    assert cache.draft([2, 3], 4) == []
    assert cache.draft([1, 2, 3], 4) == [4]


def test_cache_evicts_the_oldest_keys_first() -> None:
    cache = NGramCache(n=1, min_count=1, max_entries=3)
    cache.learn([10, 11, 12, 13])
    assert len(cache) == 3
    cache.learn([20, 21])
    assert len(cache) == 3
    assert cache.counts([10]) == {}
    assert cache.counts([11]) == {12: 1}
    assert cache.counts([20]) == {21: 1}
    # re-learning an old key does not refresh its age
    cache.learn([11, 12, 30, 31, 32])
    assert len(cache) == 3
    assert cache.counts([11]) == {}
    assert cache.counts([12]) == {}
    assert cache.counts([20]) == {21: 1}
    assert cache.draft([30], 2) == [31, 32]


def test_cache_rejects_invalid_settings() -> None:
    with pytest.raises(InvalidSettingsError):
        NGramCache(n=0)
    with pytest.raises(InvalidSettingsError):
        NGramCache(min_count=0)
    with pytest.raises(InvalidSettingsError):
        NGramCache(max_entries=0)


# --- NGramProposer ----------------------------------------------------------------------------


def test_proposer_implements_the_protocol() -> None:
    proposer: Proposer = NGramProposer()
    assert proposer.name == "ngram"


def test_proposer_drafts_from_the_sequence() -> None:
    proposer = NGramProposer(2, 4)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3]
    proposer.reset(prompt)
    before = time.perf_counter()
    draft = proposer.propose(prompt, DraftLimits(3), sampler())
    elapsed = time.perf_counter() - before
    assert draft.tokens == [4, 5, 6]
    assert draft.source == "ngram"
    assert draft.q_draft is None
    # the lookup's own time, measured (a Draft's default is 0.0), within the call's
    assert 0.0 < draft.seconds <= elapsed
    assert proposer.last_match_length == 3
    # the engine appends the accepted tokens; only those get indexed
    tokens = [*prompt, 4, 5]
    draft = proposer.propose(tokens, DraftLimits(10), sampler())
    assert draft.tokens == [6, 7, 8, 0, 1, 2, 3, 4, 5]
    assert proposer.last_match_length == 4
    assert list(proposer.index.tokens) == tokens


def test_proposer_returns_an_empty_draft_when_nothing_matches() -> None:
    proposer = NGramProposer()
    proposer.reset([1, 2, 3, 4])
    draft = proposer.propose([1, 2, 3, 4], DraftLimits(5), sampler())
    assert draft.tokens == []
    assert len(draft) == 0
    assert draft.source == "ngram"
    assert proposer.last_match_length == 0


def test_proposer_falls_back_to_the_cache() -> None:
    cache = NGramCache(n=2, min_count=2)
    proposer = NGramProposer(2, 4, cache=cache)
    for _ in range(2):
        proposer.reset([7, 8])
        proposer.finish([7, 8, 20, 21, 22, 23])
    proposer.reset([1, 20, 21])
    draft = proposer.propose([1, 20, 21], DraftLimits(2), sampler())
    assert draft.tokens == [22, 23]
    assert draft.source == "ngram-cache"
    assert draft.q_draft is None
    assert proposer.last_match_length == 0
    # a match in the sequence itself wins over the cache
    tokens = [20, 21, 5, 1, 20, 21]
    proposer.reset(tokens)
    draft = proposer.propose(tokens, DraftLimits(2), sampler())
    assert draft.tokens == [5, 1]
    assert draft.source == "ngram"
    assert proposer.last_match_length == 2


def test_finish_without_a_cache_is_harmless() -> None:
    proposer = NGramProposer()
    proposer.reset([1, 2, 1])
    proposer.finish([1, 2, 1, 2])
    assert proposer.cache is None


def test_reset_keeps_the_shared_prefix() -> None:
    rng = np.random.default_rng(99)
    proposer = NGramProposer(2, 4)
    counting = CountingIndex(2, 4)
    proposer._index = counting
    first = [int(x) for x in rng.integers(0, 5, size=200)]
    proposer.reset(first)
    assert counting.positions_visited == 200

    # an extension of the indexed prompt: only the tail is indexed
    counting.positions_visited = 0
    extended = [*first, 1, 2, 3]
    proposer.reset(extended)
    assert counting.positions_visited == 3

    # diverging at position 150: 53 positions dropped, 60 added
    counting.positions_visited = 0
    edited = [*first[:150], *(int(x) for x in rng.integers(5, 9, size=60))]
    proposer.reset(edited)
    assert counting.positions_visited == 53 + 60
    assert list(counting.tokens) == edited
    fresh = built(edited)
    assert counting.entries == fresh.entries
    for max_len in (1, 4, 16):
        assert counting.lookup(max_len) == fresh.lookup(max_len)

    # a shorter prompt that is a prefix: truncation only
    counting.positions_visited = 0
    proposer.reset(edited[:100])
    assert counting.positions_visited == 110
    assert list(counting.tokens) == edited[:100]
    assert counting.entries == expected_entries(100, 2, 4)


def test_proposer_follows_a_long_generation_incrementally() -> None:
    rng = np.random.default_rng(3)
    proposer = NGramProposer(2, 4)
    counting = CountingIndex(2, 4)
    proposer._index = counting
    tokens = [int(x) for x in rng.integers(0, 4, size=50)]
    proposer.reset(tokens)
    for _ in range(300):
        max_len = int(rng.integers(1, 8))
        draft = proposer.propose(tokens, DraftLimits(max_len), sampler())
        expected, n = reference_lookup(tokens, 2, 4, max_len)
        assert draft.tokens == expected
        assert proposer.last_match_length == n
        tokens = [*tokens, *(int(x) for x in rng.integers(0, 4, size=int(rng.integers(1, 4))))]
    # every position was indexed exactly once across all the propose calls
    assert counting.positions_visited == len(counting)


def test_min_match_skips_short_matches() -> None:
    index = NGramIndex(n_min=1, n_max=6)
    #          a  b  c  d  X  ...  b  c  d  Y  ...  c  d
    index.extend([1, 2, 3, 4, 50, 9, 2, 3, 4, 60, 9, 3, 4])
    assert index.lookup(3) == ([60, 9, 3], 2)  # "3 4" most recently before the suffix
    assert index.lookup(3, min_match=2) == ([60, 9, 3], 2)
    assert index.lookup(3, min_match=3) == ([], 0)  # "9 3 4" never occurred before
    proposer = NGramProposer(1, 6)
    proposer.reset([1, 2, 3, 4, 50, 1, 2, 3])
    assert proposer.propose(
        [1, 2, 3, 4, 50, 1, 2, 3], DraftLimits(2, min_match=3), sampler()
    ).tokens == [4, 50]
    assert (
        proposer.propose([1, 2, 3, 4, 50, 1, 2, 3], DraftLimits(2, min_match=4), sampler()).tokens
        == []
    )
