"""Suffix drafts: continuations chosen by how often they followed the longest match.

SuffixDecoding (arXiv 2411.04975; vLLM's `suffix` method) drafts from a suffix tree over the
request's own prompt and output plus a global one over earlier requests: it finds the longest
suffix of the sequence that occurred before, then walks the tree's most frequent children
while the estimated probability of the path (the product of child count / parent count)
stays above a floor, up to a length proportional to the match. Agents and editors send the
same files, tool results and answers again and again, so those continuations are often long
and right.

The tree's counts are the occurrences of the matched text, so this module keeps occurrence
lists instead of a tree (bounded memory, cheap appends, and the same answers for the
depths we walk):

* `tree_lookup` walks the request's own sequence through the positions `NGramIndex` already
  keeps (every n-gram up to its n_max), extending each match backwards to `MAX_DEPTH`.
* `SuffixStore` holds earlier sequences (prompts and answers) with one anchor n-gram entry
  per token, deduplicated by chained block hashes (an agent re-sends its whole conversation
  every turn: only the new tail is stored) and bounded by `max_tokens` with the least
  recently sent content dropped first.

Both are deterministic: their drafts are verified by sample-and-compare like every n-gram
draft, so they never change what the target would have produced.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from localspec.errors import InvalidSettingsError

MAX_DEPTH = 32
"""The longest match measured (the tree's depth): longer matches draft no longer."""
MAX_CANDIDATES = 64
"""Occurrences examined per lookup, most recent first: a common n-gram's list is long, and
the recent occurrences are the text the user is working on."""
SPEC_FACTOR = 1.0
"""A draft is at most this many times the match length (SuffixDecoding's max_spec_factor)."""
MIN_PROBABILITY = 0.1
"""Drafting stops before a token that would bring the path's estimated probability below."""
BLOCK = 64
"""Tokens per deduplication block: a sequence is stored from its first block not seen."""
OFFSET_BITS = 32


@dataclass(frozen=True)
class SuffixDraft:
    """A suffix lookup's draft: its tokens, the match length behind it, and each token's
    estimated probability given the ones before it (count of the child / count of the node)."""

    tokens: list[int]
    match: int
    probabilities: tuple[float, ...]


def nothing_found() -> SuffixDraft:
    """A lookup that found nothing (a fresh list each time: drafts' token lists are theirs)."""
    return SuffixDraft([], 0, ())


class Indexed(Protocol):
    """A sequence with the positions of its n-grams (`localspec.speculative.ngram.NGramIndex`)."""

    n_min: int
    n_max: int

    @property
    def tokens(self) -> Sequence[int]: ...

    def ends(self, key: Sequence[int]) -> Sequence[int]: ...


def common_suffix(a: Sequence[int], a_end: int, b: Sequence[int], b_end: int, limit: int) -> int:
    """How many tokens a[..a_end] and b[..b_end] (both inclusive) share at their ends, up to
    `limit`."""
    n = 0
    while n < limit and n <= a_end and n <= b_end and a[a_end - n] == b[b_end - n]:
        n += 1
    return n


Occurrence = tuple[Sequence[int], int]
"""A text and the position of the token that followed the match in it."""


def walk(
    occurrences: Sequence[Occurrence], max_len: int, min_probability: float = MIN_PROBABILITY
) -> tuple[list[int], tuple[float, ...]]:
    """The most frequent continuation of `occurrences`, token by token.

    At each position the token that followed most of the surviving occurrences is taken
    (ties: the one seen first in `occurrences`, the most recent), with probability its count
    over all survivors (an occurrence that ran out of text still counts against it, as a tree
    node's count includes the text ending there). Only occurrences that continue with the
    taken token survive. Drafting stops at `max_len`, when nothing survives, or before the
    product of probabilities would fall below `min_probability`.
    """
    live = [(text, at) for text, at in occurrences]
    drafted: list[int] = []
    probabilities: list[float] = []
    path = 1.0
    while live and len(drafted) < max_len:
        following = Counter(text[at] for text, at in live if at < len(text))
        if not following:
            break
        best = max(following.values())
        token = next(
            t for t in (text[at] for text, at in live if at < len(text)) if following[t] == best
        )
        probability = best / len(live)
        if path * probability < min_probability:
            break
        path *= probability
        drafted.append(token)
        probabilities.append(probability)
        live = [(text, at + 1) for text, at in live if at < len(text) and text[at] == token]
    return drafted, tuple(probabilities)


def draft_length(match: int, max_len: int, factor: float = SPEC_FACTOR) -> int:
    """How long a draft a match of this length may give: proportional to the match."""
    return min(max_len, max(1, math.floor(factor * match)))


def _best(found: Sequence[tuple[Sequence[int], int, int]]) -> tuple[list[Occurrence], int]:
    """The occurrences with the longest match (text, continuation, match), and that length."""
    if not found:
        return [], 0
    longest = max(match for _, _, match in found)
    return [(text, at) for text, at, match in found if match == longest], longest


def tree_lookup(
    index: Indexed, max_len: int, min_match: int = 1, *, max_depth: int = MAX_DEPTH
) -> SuffixDraft:
    """The suffix draft from the request's own sequence (its prompt and output so far).

    The longest indexed n-gram ending the sequence gives the candidates; where it is as
    long as the index goes, each candidate's match is measured further back, up to
    `max_depth`. The continuation is read from the sequence itself and never passes its end.
    """
    tokens = index.tokens
    size = len(tokens)
    for n in range(min(index.n_max, size), max(index.n_min, min_match) - 1, -1):
        ends = index.ends(tokens[size - n :])
        if len(ends) < 2:
            continue
        found = []
        for end in reversed(ends[-MAX_CANDIDATES - 1 : -1]):  # not the suffix itself
            match = n
            if n == index.n_max:
                match = common_suffix(tokens, end, tokens, size - 1, max_depth)
            found.append((tokens, end + 1, match))
        occurrences, match = _best(found)
        drafted, probabilities = walk(occurrences, draft_length(match, max_len))
        return SuffixDraft(drafted, match, probabilities) if drafted else nothing_found()
    return nothing_found()


class SuffixStore:
    """Earlier sequences (prompts with their answers) for suffix drafts across requests.

    Each stored token past the first `anchor - 1` of its text adds one entry: the anchor
    n-gram ending there, packed with the text's id. A lookup reads the entries of the
    sequence's last anchor n-gram and measures each match backwards. Memory is bounded by
    `max_tokens` stored tokens, so by that many entries.

    Texts are kept in the order they were stored and the oldest is dropped first; content
    sent again while it sits in the older half is stored again as new (the overlap is
    dropped with the old copy), so what clients keep sending stays: least recently used
    first. Its entries are a prefix of every list they are in, which makes dropping them
    cheap.
    """

    def __init__(
        self, max_tokens: int = 131_072, anchor: int = 4, max_depth: int = MAX_DEPTH
    ) -> None:
        if anchor < 1 or max_depth < anchor:
            raise InvalidSettingsError("suffix store: need 1 <= anchor <= max_depth")
        if max_tokens < BLOCK:
            raise InvalidSettingsError(f"suffix store: max_tokens must be at least {BLOCK}")
        self.max_tokens = max_tokens
        self.anchor = anchor
        self.max_depth = max_depth
        # told of every text kept, after it is kept (`localspec.suffix_file` appends it)
        self.on_store: Callable[[list[int]], None] | None = None
        self._held: list[list[int]] | None = None
        self.clear()

    def clear(self) -> None:
        """Forget every stored text."""
        self._texts: dict[int, list[int]] = {}  # id -> tokens, oldest first
        self._blocks: dict[int, list[int]] = {}  # id -> the chained block hashes it owns
        self._owner: dict[int, int] = {}  # chained block hash -> text id
        self._ends: dict[tuple[int, ...], list[int]] = {}
        self._next_id = 0
        self._tokens = 0
        self._entries = 0

    def __len__(self) -> int:
        """Stored tokens."""
        return self._tokens

    @property
    def entries(self) -> int:
        """Anchor entries held: at most one per stored token."""
        return self._entries

    @property
    def texts(self) -> list[list[int]]:
        """The stored texts, oldest first (what a file of the store holds)."""
        return [list(text) for text in self._texts.values()]

    def add(self, tokens: Sequence[int]) -> int:
        """Store what `tokens` holds that the store does not: the part from its first block
        not stored (or stored in the older half), with `max_depth` tokens before it so
        matches across the seam are found. Returns the tokens stored (0 while `holding`)."""
        seq = [int(token) for token in tokens]
        if self._held is not None:
            self._held.append(seq)
            return 0
        hashes = list(_chained_hashes(seq))
        fresh = next((i for i, h in enumerate(hashes) if not self._recent(h)), len(hashes))
        if fresh == len(hashes) or not seq:
            return 0
        # a text longer than the whole store keeps its end, the part nearest what comes next
        start = max(0, fresh * BLOCK - self.max_depth, len(seq) - self.max_tokens)
        text = seq[start:]
        owned = hashes[max(fresh, -(-start // BLOCK)) :]  # the blocks whole in the text
        text_id = self._next_id
        self._next_id += 1
        self._texts[text_id] = text
        self._blocks[text_id] = owned
        for h in owned:
            self._owner[h] = text_id
        for end in range(self.anchor - 1, len(text)):
            key = tuple(text[end - self.anchor + 1 : end + 1])
            self._ends.setdefault(key, []).append(text_id << OFFSET_BITS | end)
            self._entries += 1
        self._tokens += len(text)
        while self._tokens > self.max_tokens and len(self._texts) > 1:
            self._drop_oldest()
        if self.on_store is not None:
            self.on_store(text)
        return len(text)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Texts added meanwhile are stored when it ends. A benchmark runs each prompt once
        per mode, and no mode may draft from another mode's answer to that same prompt:
        each drafts from what the earlier prompts left, as in a user's session."""
        if self._held is not None:  # already held: the outer hold stores them
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            for text in held:
                self.add(text)

    def _recent(self, block_hash: int) -> bool:
        """Whether this block is stored in the newer half of the store (by text id)."""
        owner = self._owner.get(block_hash)
        if owner is None or not self._texts:
            return False
        oldest = next(iter(self._texts))
        return owner >= oldest + (self._next_id - oldest) // 2

    def _drop_oldest(self) -> None:
        text_id = next(iter(self._texts))
        text = self._texts.pop(text_id)
        for h in self._blocks.pop(text_id):
            if self._owner.get(h) == text_id:
                del self._owner[h]
        for end in range(self.anchor - 1, len(text)):
            key = tuple(text[end - self.anchor + 1 : end + 1])
            ends = self._ends.get(key)
            if ends is None:
                continue  # dropped with an earlier end of this text (a repeated n-gram)
            mine = 0
            while mine < len(ends) and ends[mine] >> OFFSET_BITS == text_id:
                mine += 1
            del ends[:mine]
            self._entries -= mine
            if not ends:
                del self._ends[key]
        self._tokens -= len(text)

    def lookup(self, context: Sequence[int], max_len: int, min_match: int = 1) -> SuffixDraft:
        """The suffix draft for `context` from the stored texts (none under `min_match`)."""
        if max_len <= 0 or len(context) < self.anchor:
            return nothing_found()
        ends = self._ends.get(tuple(int(t) for t in context[len(context) - self.anchor :]))
        if not ends:
            return nothing_found()
        last = len(context) - 1
        mask = (1 << OFFSET_BITS) - 1
        found = []
        for packed in reversed(ends[-MAX_CANDIDATES:]):
            text = self._texts[packed >> OFFSET_BITS]
            end = packed & mask
            if end + 1 < len(text):
                match = common_suffix(text, end, context, last, self.max_depth)
                found.append((text, end + 1, match))
        occurrences, match = _best(found)
        if match < min_match:
            return nothing_found()
        drafted, probabilities = walk(occurrences, draft_length(match, max_len))
        return SuffixDraft(drafted, match, probabilities) if drafted else nothing_found()


def _chained_hashes(seq: Sequence[int]) -> Iterator[int]:
    """A hash per BLOCK tokens (the last block may be short) that covers everything before
    it too: equal hashes mean equal prefixes, whatever the texts were."""
    chained = 0
    for start in range(0, len(seq), BLOCK):
        chained = hash((chained, tuple(seq[start : start + BLOCK])))
        yield chained
