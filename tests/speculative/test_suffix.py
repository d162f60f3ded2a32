"""Suffix drafts on token lists: the frequency walk, the request's own sequence, the store."""

import numpy as np
import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.ngram import NGramIndex, NGramProposer
from localspec.speculative.proposer import DraftLimits
from localspec.speculative.sampling import Sampler, SamplingSettings
from localspec.speculative.sources import STORE, TREE
from localspec.speculative.suffix import (
    BLOCK,
    MAX_DEPTH,
    SuffixStore,
    common_suffix,
    draft_length,
    tree_lookup,
    walk,
)


def test_walk_takes_the_most_frequent_continuation_while_it_is_likely() -> None:
    texts = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9, 9]]
    drafted, probabilities = walk([(t, 1) for t in texts], max_len=8, min_probability=0.1)
    # 2 follows all three; 3 follows two of three; then 4 and 5 split the two survivors
    assert drafted == [2, 3, 4]
    assert probabilities == pytest.approx((1.0, 2 / 3, 1 / 2))


def test_walk_stops_before_the_path_falls_below_the_floor() -> None:
    texts = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9, 9]]
    drafted, _ = walk([(t, 1) for t in texts], max_len=8, min_probability=0.5)
    assert drafted == [2, 3]  # 2/3 * 1/2 = 1/3 would be under 0.5


def test_walk_breaks_ties_towards_the_first_occurrence_and_counts_ends() -> None:
    drafted, _ = walk([([7, 8], 1), ([7, 6], 1)], max_len=4, min_probability=0.1)
    assert drafted == [8]
    # an occurrence at the end of its text still counts against its siblings
    drafted, probabilities = walk([([7], 1), ([7, 6], 1)], max_len=4, min_probability=0.1)
    assert (drafted, probabilities) == ([6], (0.5,))


def test_draft_length_is_proportional_to_the_match() -> None:
    assert [draft_length(m, 8) for m in (1, 3, 8, 20)] == [1, 3, 8, 8]
    assert draft_length(4, 8, factor=0.5) == 2


def test_common_suffix_is_bounded() -> None:
    a = [1, 2, 3, 4, 5]
    assert common_suffix(a, 4, [0, 3, 4, 5], 3, limit=10) == 3
    assert common_suffix(a, 4, a, 4, limit=2) == 2


def _index(tokens: list[int], n_max: int = 4) -> NGramIndex:
    index = NGramIndex(2, n_max)
    index.extend(tokens)
    return index


def test_tree_lookup_prefers_the_frequent_continuation_over_the_latest() -> None:
    # "5 6" was followed by 7 twice, then by 9 once (the latest): plain lookup takes 9
    tokens = [5, 6, 7, 1, 5, 6, 7, 2, 5, 6, 9, 3, 5, 6]
    index = _index(tokens)
    assert index.lookup(4)[0][:1] == [9]
    walked = tree_lookup(index, max_len=4)
    assert walked.tokens[0] == 7
    assert walked.match == 2


def test_tree_lookup_measures_matches_past_the_index_and_drafts_that_long() -> None:
    copied = list(range(100, 120))
    tokens = [*copied, 1, *copied[:10]]
    walked = tree_lookup(_index(tokens, n_max=4), max_len=64)
    assert walked.match == 10  # measured backwards past the index's 4
    assert walked.tokens == copied[10:20]  # 10 tokens: the match's length, to the end of the copy
    assert walked.probabilities == (1.0,) * 10


def test_tree_lookup_never_reads_past_the_sequence() -> None:
    tokens = [4, 4, 4, 4]
    walked = tree_lookup(_index(tokens), max_len=8)
    assert walked.tokens == [4]  # the only occurrence with a continuation inside the sequence


def test_tree_lookup_respects_min_match() -> None:
    tokens = [1, 2, 3, 9, 1, 2]
    assert tree_lookup(_index(tokens), 4, min_match=2).tokens == [3, 9]
    assert tree_lookup(_index(tokens), 4, min_match=3).tokens == []


def test_store_drafts_from_an_earlier_text() -> None:
    store = SuffixStore(max_tokens=1024)
    earlier = list(range(10, 40))
    store.add(earlier)
    found = store.lookup([1, 2, *earlier[:8]], max_len=16)
    assert found.match == 8
    assert found.tokens == earlier[8:16]
    assert store.lookup([1, 2, 3, 4, 5], max_len=16).tokens == []
    assert store.lookup([*earlier[:8]], max_len=16, min_match=9).tokens == []


def test_store_walks_the_most_frequent_of_its_texts() -> None:
    store = SuffixStore(max_tokens=1024, anchor=2)
    for first, tail in ((50, 7), (51, 7), (52, 8)):
        store.add([first, 1, 2, 3, 4, tail, 100 + tail])
    found = store.lookup([9, 3, 4], max_len=2)
    assert found.tokens == [7, 107]
    assert found.probabilities == pytest.approx((2 / 3, 1.0))


def test_store_keeps_only_what_a_resent_conversation_adds() -> None:
    store = SuffixStore(max_tokens=100_000)
    first = list(range(1000, 1000 + 5 * BLOCK))
    assert store.add(first) == len(first)
    assert store.add(first) == 0  # sent again: nothing new
    second = [*first, *range(5000, 5000 + BLOCK // 2)]
    stored = store.add(second)
    # the new half block, and MAX_DEPTH tokens before it
    assert stored == BLOCK // 2 + MAX_DEPTH
    assert len(store) == len(first) + stored
    # a match across the seam is still found
    assert store.lookup(first[-6:], max_len=4).tokens == [5000, 5001, 5002, 5003]


def test_store_stays_within_its_bound_through_a_long_session() -> None:
    store = SuffixStore(max_tokens=4096, anchor=4)
    kept = list(range(50_000, 50_000 + 300))  # what a client keeps sending (its system prompt)
    for turn in range(200):
        store.add([*kept, *range(turn * 1000, turn * 1000 + 500)])
        assert len(store) <= 4096
        assert store.entries <= len(store)
        assert store.entries == sum(len(text) - 3 for text in store.texts)
    # what was sent in every turn is still there; the early turns' own text is not
    assert store.lookup([1, *kept[:6]], max_len=3).tokens == kept[6:9]
    assert store.lookup([3, 1000, 1001, 1002, 1003], max_len=3).tokens == []
    latest = list(range(199_000, 199_011))
    assert store.lookup(latest[:8], max_len=3).tokens == latest[8:]


def test_store_holding_stores_afterwards() -> None:
    store = SuffixStore(max_tokens=1024)
    with store.holding():
        assert store.add(list(range(100))) == 0
        assert store.lookup(list(range(10)), max_len=4).tokens == []
    assert store.lookup(list(range(10)), max_len=4).tokens == [10, 11, 12, 13]
    store.clear()
    assert (len(store), store.entries, store.texts) == (0, 0, [])


def test_store_refuses_bad_settings() -> None:
    with pytest.raises(InvalidSettingsError):
        SuffixStore(max_tokens=10)
    with pytest.raises(InvalidSettingsError):
        SuffixStore(anchor=0)


SAMPLER = Sampler(SamplingSettings(), np.random.default_rng(0))


def test_proposer_offers_suffix_lookups_only_when_the_request_allows_them() -> None:
    store = SuffixStore(max_tokens=1024)
    store.add([40, 41, 42, 43, 44, 45, 46, 47])
    proposer = NGramProposer(2, 4, store=store)
    tokens = [40, 41, 42, 43, 7, 8, 40, 41, 42, 43]
    proposer.reset(tokens)
    with_suffix = proposer.lookups(tokens, DraftLimits(4, suffix=True), {})
    assert {lookup.source for lookup in with_suffix} == {"context", TREE, STORE}
    found = {lookup.source: lookup.draft for lookup in with_suffix}
    assert found[STORE].tokens == [44, 45, 46, 47]
    assert found[STORE].source == "ngram-store"
    assert found["context"].tokens == [7, 8, 40, 41]
    without = proposer.lookups(tokens, DraftLimits(4), {})
    assert {lookup.source for lookup in without} == {"context"}


def test_proposer_offers_the_tree_walk() -> None:
    proposer = NGramProposer(2, 4)
    tokens = [5, 6, 7, 1, 5, 6, 7, 2, 5, 6, 9, 3, 5, 6]
    proposer.reset(tokens)
    found = {x.source: x for x in proposer.lookups(tokens, DraftLimits(4, suffix=True), {})}
    assert found[TREE].draft.tokens[0] == 7
    assert found[TREE].draft.source == "ngram-tree"
    assert found["context"].draft.tokens[0] == 9


def test_fixed_ngram_falls_back_to_the_store_and_finish_teaches_it() -> None:
    store = SuffixStore(max_tokens=1024)
    proposer = NGramProposer(2, 4, store=store)
    answer = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    proposer.finish(answer)
    tokens = [90, 91, 1, 2, 3, 4]
    proposer.reset(tokens)
    draft = proposer.propose(tokens, DraftLimits(3, min_match=2, suffix=True), SAMPLER)
    assert (draft.tokens, draft.source) == ([5, 6, 7], "ngram-store")
    assert proposer.propose(tokens, DraftLimits(3, min_match=2), SAMPLER).tokens == []


def test_a_text_longer_than_the_store_keeps_its_end() -> None:
    store = SuffixStore(max_tokens=4 * BLOCK)
    long_text = list(range(10_000, 10_000 + 10 * BLOCK))
    assert store.add(long_text) == 4 * BLOCK
    assert len(store) == store.entries + 3 == 4 * BLOCK
    assert store.lookup(long_text[-10:-3], max_len=3).tokens == long_text[-3:]


def test_holding_nests_and_survives_a_clear() -> None:
    store = SuffixStore(max_tokens=1024)
    with store.holding():
        with store.holding():
            store.add(list(range(100)))
        store.clear()
        assert len(store) == 0
    assert len(store) == 100
