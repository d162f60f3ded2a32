"""N-gram drafting: prompt lookup over the current sequence, and a session-level n-gram cache.

Three pieces, all on plain token lists (no model):

* `NGramIndex` indexes every n-gram of a growing token list by its tokens, so finding where the
  current suffix occurred before costs one dict lookup per n instead of a rescan. It grows and
  shrinks at the end only, the way a generation's context does.
* `NGramCache` counts which token followed each n-gram in earlier generations of the session, for
  drafting when the current sequence itself has no match (llama.cpp's dynamic n-gram cache).
* `NGramProposer` puts them behind the `Proposer` protocol.

Proposals are deterministic, so they carry no `q_draft` and are verified by sample-and-compare,
which keeps the output distributed exactly as plain decoding. Under a constraint the tokens it
forces (a JSON key its schema fixes) are proposed too: a draft the target nearly always takes.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from localspec.errors import InvalidSettingsError
from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.sampling import Sampler
from localspec.speculative.sources import (
    CONTEXT,
    FORCED_MATCH,
    SESSION,
    STORE,
    TREE,
    Interval,
)
from localspec.speculative.suffix import SuffixStore, tree_lookup

Key = tuple[int, ...]


class NGramIndex:
    """Every n-gram (n_min <= n <= n_max) of a token list, mapped to the positions it ends at.

    Positions per key are appended in increasing order and removed from the end only, so the most
    recent occurrence is always the last entry and truncation pops exactly the entries it added.
    The keys a position added are recomputed from the tokens when it is removed rather than
    stored, which keeps memory at one list entry per indexed n-gram.
    """

    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        if n_min < 1:
            raise InvalidSettingsError("n-gram n_min must be >= 1")
        if n_max < n_min:
            raise InvalidSettingsError("n-gram n_max must be >= n_min")
        self.n_min = n_min
        self.n_max = n_max
        self._tokens: list[int] = []
        self._ends: dict[Key, list[int]] = {}

    @property
    def tokens(self) -> Sequence[int]:
        """The indexed tokens; a live view, not a copy, so callers must not mutate it."""
        return self._tokens

    @property
    def entries(self) -> int:
        """How many (n-gram, end position) pairs are stored: one per n per position that fits."""
        return sum(len(ends) for ends in self._ends.values())

    def __len__(self) -> int:
        return len(self._tokens)

    def _keys_ending_at(self, t: int) -> list[Key]:
        tokens = self._tokens
        return [
            tuple(tokens[t - n + 1 : t + 1])
            for n in range(self.n_min, self.n_max + 1)
            if n <= t + 1
        ]

    def extend(self, tokens: Sequence[int]) -> None:
        """Append `tokens`, indexing only the n-grams that end at the new positions."""
        for token in tokens:
            self._tokens.append(int(token))
            t = len(self._tokens) - 1
            for key in self._keys_ending_at(t):
                self._ends.setdefault(key, []).append(t)

    def truncate(self, length: int) -> None:
        """Drop the tokens at positions >= `length` and every n-gram ending at them."""
        length = max(length, 0)
        for t in range(len(self._tokens) - 1, length - 1, -1):
            for key in self._keys_ending_at(t):
                ends = self._ends[key]
                ends.pop()
                if not ends:
                    del self._ends[key]
            self._tokens.pop()

    def ends(self, key: Sequence[int]) -> Sequence[int]:
        """The positions where `key` (n_min..n_max tokens) ends, ascending; a live view."""
        return self._ends.get(tuple(key), ())

    def lookup(
        self, max_len: int, min_match: int = 1, within: Sequence[Interval] | None = None
    ) -> tuple[list[int], int]:
        """What followed the latest earlier occurrence of the longest matching suffix.

        Returns (continuation of at most `max_len` tokens, the n that matched), or ([], 0)
        when no suffix of at least max(n_min, min_match) tokens occurred before.
        Longer matches predict better, so n goes from n_max down; among occurrences of one
        n-gram the most recent is taken because nearby text (the code being edited, the last
        turn) is the likeliest to repeat. The continuation stops at the end of the sequence, so
        an occurrence close to the suffix yields a shorter draft.

        `within` (sorted intervals of positions) limits the search to occurrences whose
        continuation starts inside one of them, and cuts the continuation at that
        interval's end: one region of a prompt searched apart (`localspec.speculative.sources`).
        """
        size = len(self._tokens)
        if max_len <= 0:
            return [], 0
        intervals = ((0, size),) if within is None else within
        for n in range(min(self.n_max, size), max(self.n_min, min_match) - 1, -1):
            ends = self._ends.get(tuple(self._tokens[size - n :]))
            # the suffix itself is always the last entry; an earlier one ends before size - 1,
            # so at least one token follows it
            if ends is None or len(ends) < 2:
                continue
            for start, until in reversed(intervals):
                stop = min(until, size)
                # the latest occurrence whose continuation (from end + 1) starts before stop
                i = bisect.bisect_left(ends, stop - 1) - 1
                if i >= 0 and ends[i] + 1 >= start:
                    begin = ends[i] + 1
                    return self._tokens[begin : min(begin + max_len, stop)], n
        return [], 0


class NGramCache:
    """Counts of the token that followed each n-gram, learned from whole generations.

    Memory is bounded by `max_entries` n-gram keys: past it, the keys learned first are dropped
    (dict insertion order; re-learning a key does not refresh its age). Old keys are the ones
    least likely to belong to the code the session is working on now, and insertion order costs
    nothing to keep.
    """

    def __init__(self, n: int = 3, min_count: int = 2, max_entries: int = 200_000) -> None:
        if n < 1:
            raise InvalidSettingsError("n-gram cache n must be >= 1")
        if min_count < 1:
            raise InvalidSettingsError("n-gram cache min_count must be >= 1")
        if max_entries < 1:
            raise InvalidSettingsError("n-gram cache max_entries must be >= 1")
        self.n = n
        self.min_count = min_count
        self.max_entries = max_entries
        self._next: dict[Key, dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self._next)

    def counts(self, key: Sequence[int]) -> dict[int, int]:
        """A copy of the follower counts of `key` (empty when unknown or evicted)."""
        return dict(self._next.get(tuple(key), {}))

    def learn(self, tokens: Sequence[int]) -> None:
        """Count, for every n-gram in `tokens`, the token that followed it."""
        n = self.n
        seq = [int(token) for token in tokens]
        for i in range(len(seq) - n):
            followers = self._next.setdefault(tuple(seq[i : i + n]), {})
            nxt = seq[i + n]
            followers[nxt] = followers.get(nxt, 0) + 1
        excess = len(self._next) - self.max_entries
        if excess > 0:
            # insertion order makes the first keys the oldest
            for key in list(self._next)[:excess]:
                del self._next[key]

    def draft(self, context: Sequence[int], max_len: int) -> list[int]:
        """Chain the most frequent follower while it has been seen at least `min_count` times.

        Ties go to the smaller token id so the same cache always drafts the same tokens.
        """
        n = self.n
        if max_len <= 0 or len(context) < n:
            return []
        window = [int(token) for token in context[len(context) - n :]]
        drafted: list[int] = []
        while len(drafted) < max_len:
            followers = self._next.get(tuple(window[len(window) - n :]))
            if not followers:
                break
            token, count = min(followers.items(), key=lambda item: (-item[1], item[0]))
            if count < self.min_count:
                break
            drafted.append(token)
            window.append(token)
        return drafted


@dataclass(frozen=True)
class Lookup:
    """One source's proposal: where it came from, the length of the match behind it, and
    the draft (its `source` names the region for the statistics: "ngram-suffix")."""

    source: str
    match: int
    draft: Draft


def _draft_source(source: str) -> str:
    return "ngram" if source == CONTEXT else f"ngram-{source}"


def _constrained(found: list[Lookup], limits: DraftLimits) -> list[Lookup]:
    """The lookups cut where the constraint forbids a token, plus its forced tokens."""
    constraint = limits.constraint
    assert constraint is not None
    kept = []
    forced = constraint.forced()[: limits.max_len]
    if forced and not any(lookup.draft.tokens[: len(forced)] == forced for lookup in found):
        found = [Lookup("forced", FORCED_MATCH, Draft(forced, "forced")), *found]
    for lookup in found:
        tokens = lookup.draft.tokens
        allowed = constraint.validate(tokens)
        if allowed:
            draft = replace(lookup.draft, tokens=tokens[:allowed], cut=len(tokens) - allowed)
            kept.append(replace(lookup, draft=draft))
    return kept


class NGramProposer:
    """Prompt-lookup drafting, falling back to the store of earlier requests (suffix drafts,
    when the request allows them) and then the session's n-gram cache when nothing matches.

    The sampler is unused: proposals are deterministic and verified by sample-and-compare.
    """

    name = "ngram"

    def __init__(
        self,
        n_min: int = 2,
        n_max: int = 4,
        cache: NGramCache | None = None,
        store: SuffixStore | None = None,
    ) -> None:
        self._index = NGramIndex(n_min, n_max)
        self.cache = cache
        self.store = store
        # the tuner reads it: long matches are worth long drafts
        self.last_match_length = 0

    @property
    def index(self) -> NGramIndex:
        return self._index

    def reset(self, prompt: Sequence[int]) -> None:
        """Re-sync the index to `prompt`, keeping the part it shares with what is indexed.

        Chat turns and editor completions usually resend the previous context plus a little, so
        keeping the common prefix turns a full re-index into an index of the new tail.
        """
        indexed = self._index.tokens
        shared = min(len(indexed), len(prompt))
        if shared:
            differ = np.flatnonzero(
                np.asarray(indexed[:shared], dtype=np.int64)
                != np.asarray(prompt[:shared], dtype=np.int64)
            )
            if differ.size:
                shared = int(differ[0])
        self._index.truncate(shared)
        self._index.extend(prompt[shared:])
        self.last_match_length = 0

    def _sync(self, tokens: Sequence[int]) -> None:
        """Index what `tokens` appended since the last call (or cut what they dropped): the
        engine guarantees `tokens` grows by appending between `reset` calls, and checking
        the prefix again would cost O(len) per step."""
        indexed = len(self._index)
        if len(tokens) < indexed:
            self._index.truncate(len(tokens))
        else:
            self._index.extend(tokens[indexed:])

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        """Draft from the latest earlier occurrence of the longest matching suffix of `tokens`.

        A constraint in `limits` cuts the draft at the first token it forbids.
        """
        start = time.perf_counter()
        self._sync(tokens)
        drafted, self.last_match_length = self._index.lookup(limits.max_len, limits.min_match)
        source = "ngram"
        stored = self._stored(tokens, limits) if not drafted and limits.suffix else None
        if stored is not None:
            drafted, self.last_match_length = stored.draft.tokens, stored.match
            source = stored.draft.source
        if not drafted and self.cache is not None:
            drafted = self.cache.draft(tokens, limits.max_len)
            if drafted:
                source = "ngram-cache"
        cut = 0
        if limits.constraint is not None:
            forced = limits.constraint.forced()[: limits.max_len]
            if forced and drafted[: len(forced)] != forced:
                drafted, source, self.last_match_length = forced, "forced", FORCED_MATCH
            allowed = limits.constraint.validate(drafted) if drafted else 0
            drafted, cut = drafted[:allowed], len(drafted) - allowed
        return Draft(drafted, source, None, time.perf_counter() - start, cut=cut)

    def lookups(
        self, tokens: Sequence[int], limits: DraftLimits, sources: Mapping[str, Sequence[Interval]]
    ) -> list[Lookup]:
        """One lookup per source that has a match: each region of `sources` searched apart
        (`localspec.speculative.sources`), and the session cache. For `auto`, whose tuner
        learns what each source is worth; an empty region map is one `context` lookup. With
        `limits.suffix` the suffix drafts are lookups too (sources `tree` and `store`).

        Under a constraint its forced tokens are a lookup of their own (match FORCED_MATCH)
        and every other is cut at the first token the constraint forbids; `seconds` of the
        first lookup is the time all of them took.
        """
        start = time.perf_counter()
        self._sync(tokens)
        found: list[Lookup] = []
        searched: Mapping[str, Sequence[Interval] | None] = sources or {CONTEXT: None}
        for source, intervals in searched.items():
            drafted, match = self._index.lookup(limits.max_len, limits.min_match, intervals)
            if drafted:
                found.append(Lookup(source, match, Draft(drafted, _draft_source(source))))
        if limits.suffix:
            found.extend(self._suffix_lookups(tokens, limits))
        if self.cache is not None:
            drafted = self.cache.draft(tokens, limits.max_len)
            if drafted:
                found.append(Lookup(SESSION, self.cache.n, Draft(drafted, "ngram-cache")))
        if limits.constraint is not None:
            found = _constrained(found, limits)
        self.last_match_length = max((lookup.match for lookup in found), default=0)
        if found:
            first = found[0]
            found[0] = replace(
                first, draft=replace(first.draft, seconds=time.perf_counter() - start)
            )
        return found

    def _suffix_lookups(self, tokens: Sequence[int], limits: DraftLimits) -> list[Lookup]:
        """The suffix drafts (`localspec.speculative.suffix`) that found something: the
        request's own sequence walked by frequency, and the store of earlier requests."""
        found = []
        walked = tree_lookup(self._index, limits.max_len, limits.min_match)
        if walked.tokens:
            found.append(Lookup(TREE, walked.match, Draft(walked.tokens, _draft_source(TREE))))
        stored = self._stored(tokens, limits)
        if stored is not None:
            found.append(stored)
        return found

    def _stored(self, tokens: Sequence[int], limits: DraftLimits) -> Lookup | None:
        """The store of earlier requests' continuation of `tokens`, if it has one."""
        if self.store is None:
            return None
        stored = self.store.lookup(tokens, limits.max_len, limits.min_match)
        if not stored.tokens:
            return None
        return Lookup(STORE, stored.match, Draft(stored.tokens, _draft_source(STORE)))

    def finish(self, tokens: Sequence[int]) -> None:
        """Teach the cache and the suffix store the finished generation (prompt and answer),
        so later generations can draft from it."""
        if self.cache is not None:
            self.cache.learn(tokens)
        if self.store is not None:
            self.store.add(tokens)
