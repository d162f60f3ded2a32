"""Where an n-gram draft comes from: the parts of a prompt that the lookup searches apart.

A fill-in-the-middle prompt is not one text. It holds the editor's extra chunks (other code
of the project), the text before the cursor and the text after it; the middle the model
writes copies each of them differently often. Repeated lines and identifiers come from the
suffix and the chunks, seldom in the order the plain lookup would find them: it takes the
latest occurrence of the longest match, which in a FIM prompt is nearly always the suffix or
the answer itself. So each region is searched on its own, and the tuner learns acceptance
per source (`localspec.speculative.tuner.ngram_key`): a source that pays on this workload is
drafted, one that does not is only scored.

The sources: `context` is everything outside a named region (the prefix, the answer so far,
and the whole prompt of a request that names none: there the lookup is what it always was);
`suffix` and `extra` are the FIM prompt's regions; `session` is the n-gram cache learned
from the session's earlier generations. `tree` and `store` are suffix drafts
(`localspec.speculative.suffix`): the most frequent continuation of the longest match in the
request's own sequence, and in the store of earlier requests' prompts and answers. A region
is a span of prompt token positions, described by whoever built the prompt
(`localspec.fim.infill_prompt`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from localspec.errors import InvalidSettingsError

CONTEXT, SUFFIX, EXTRA, SESSION = "context", "suffix", "extra", "session"
# suffix drafts (`localspec.speculative.suffix`): the request's own sequence walked by
# frequency ("tree", SuffixDecoding's per-request tree), and earlier requests' ("store")
TREE, STORE = "tree", "store"
NGRAM = "ngram"  # the tuner's name of the n-gram proposer, the first part of its keys
# the match length reported for a draft of a constraint's forced tokens (its own tuner key)
FORCED_MATCH = 1000
# the regions a prompt may name; the other two sources are not positions of the prompt
REGION_SOURCES = (SUFFIX, EXTRA)

Interval = tuple[int, int]
UNBOUNDED = sys.maxsize  # the end of an interval that lasts to the end of the sequence


@dataclass(frozen=True)
class Span:
    """Prompt positions start <= p < end that belong to `source` (one of REGION_SOURCES)."""

    source: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.source not in REGION_SOURCES:
            raise InvalidSettingsError(
                f"unknown prompt region {self.source!r}: use one of {', '.join(REGION_SOURCES)}"
            )
        if not 0 <= self.start <= self.end:
            raise InvalidSettingsError(
                f"prompt region {self.source} [{self.start}, {self.end}) must have "
                "0 <= start <= end"
            )


def source_intervals(regions: Sequence[Span], prompt_length: int) -> dict[str, list[Interval]]:
    """Each source's positions as sorted intervals of a sequence that starts with the prompt.

    Regions are clipped to the prompt (what follows it is the answer, which is `context`);
    `context` gets what no region covers, and is always present: its last interval is open
    (it ends at UNBOUNDED), so the intervals hold however long the answer grows. Regions
    must not overlap: a position has one source.
    """
    found: dict[str, list[Interval]] = {CONTEXT: []}
    cursor = 0
    for span in sorted(regions, key=lambda s: (s.start, s.end)):
        if span.start < cursor:
            raise InvalidSettingsError(
                f"prompt region {span.source} [{span.start}, {span.end}) overlaps another: "
                "give each prompt position one source"
            )
        start, end = min(span.start, prompt_length), min(span.end, prompt_length)
        if cursor < start:
            found[CONTEXT].append((cursor, start))
        if start < end:
            found.setdefault(span.source, []).append((start, end))
        cursor = max(cursor, span.end)
    found[CONTEXT].append((min(cursor, prompt_length), UNBOUNDED))
    return found


def ngram_key(match_length: int, source: str = CONTEXT) -> str:
    """The acceptance-model key of an n-gram draft that followed a match of this length in
    this source (`localspec.speculative.sources`): "ngram/3-4" for the sequence itself (the
    keys from before sources), "ngram/suffix/3-4" for a region, "ngram/session" for the
    session's cache, whose match length is fixed. A constraint's forced tokens have one key."""
    bucket = ngram_bucket(match_length)
    if source == CONTEXT or bucket == "forced":
        return f"{NGRAM}/{bucket}"
    if source == SESSION:
        return f"{NGRAM}/{SESSION}"
    return f"{NGRAM}/{source}/{bucket}"


def ngram_key_source(key: str) -> str:
    """The source an n-gram key names (`ngram_key`'s inverse): CONTEXT for the sequence's
    own keys (and a constraint's forced tokens), else the region or SESSION."""
    parts = key.split("/")
    if len(parts) == 3:
        return parts[1]
    return SESSION if parts[1:] == [SESSION] else CONTEXT


def ngram_bucket(match_length: int) -> str:
    """Longer context matches predict better; acceptance is tracked per band of lengths."""
    for low, name in (
        (FORCED_MATCH, "forced"),
        (8, "8+"),
        (5, "5-7"),
        (3, "3-4"),
        (2, "2"),
        (1, "1"),
    ):
        if match_length >= low:
            return name
    return "0"
