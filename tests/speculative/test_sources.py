"""N-gram sources on token arrays: a prompt's regions searched apart, keyed apart, and the
tuner drafting the source that pays while it only scores the others."""

from __future__ import annotations

from dataclasses import replace

import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.ngram import NGramCache, NGramIndex, NGramProposer
from localspec.speculative.proposer import DraftLimits
from localspec.speculative.simulate import AutoPolicy, Trace, hindsight, replay
from localspec.speculative.sources import (
    CONTEXT,
    EXTRA,
    FORCED_MATCH,
    SESSION,
    SUFFIX,
    UNBOUNDED,
    Span,
    ngram_key_source,
    source_intervals,
)
from localspec.speculative.tuner import (
    NGRAM,
    NONE,
    PRIORS,
    AcceptanceModel,
    HardwareProfile,
    Tuner,
    ngram_key,
)
from tests.speculative.auto_steps import propose

# batches nearly free: the tuner drafts whatever it believes is more often right than not
CHEAP = HardwareProfile(verify_s=tuple(1.0 + 0.01 * b for b in range(9)))

# a FIM-like prompt: [extra 10 11 12 13 14] [prefix 20 21] [suffix 30 31 12 13 40 41] [middle]
PROMPT = [1, 10, 11, 12, 13, 14, 2, 20, 21, 3, 30, 31, 12, 13, 40, 41, 4]
REGIONS = (Span(EXTRA, 1, 6), Span(SUFFIX, 10, 16))


def test_intervals_give_each_position_one_source_and_the_answer_to_context() -> None:
    found = source_intervals(REGIONS, len(PROMPT))
    assert found == {
        CONTEXT: [(0, 1), (6, 10), (16, UNBOUNDED)],
        EXTRA: [(1, 6)],
        SUFFIX: [(10, 16)],
    }
    # regions are clipped to the prompt: what follows it is the answer
    assert source_intervals((Span(SUFFIX, 2, 50),), 5) == {
        CONTEXT: [(0, 2), (5, UNBOUNDED)],
        SUFFIX: [(2, 5)],
    }
    assert source_intervals((), 5) == {CONTEXT: [(0, UNBOUNDED)]}


def test_bad_regions_are_refused() -> None:
    with pytest.raises(InvalidSettingsError, match="unknown prompt region"):
        Span("prefix", 0, 1)
    with pytest.raises(InvalidSettingsError, match="start <= end"):
        Span(SUFFIX, 3, 2)
    with pytest.raises(InvalidSettingsError, match="overlaps"):
        source_intervals((Span(EXTRA, 0, 5), Span(SUFFIX, 4, 8)), 10)


def test_keys_per_source_keep_the_plain_keys_for_the_sequence_itself() -> None:
    assert ngram_key(3) == ngram_key(3, CONTEXT) == f"{NGRAM}/3-4"
    assert ngram_key(9, SUFFIX) == f"{NGRAM}/suffix/8+"
    assert ngram_key(2, EXTRA) == f"{NGRAM}/extra/2"
    assert ngram_key(3, SESSION) == f"{NGRAM}/session"
    # a region's key starts from its match band's prior
    model = AcceptanceModel()
    accepted, rejected = PRIORS[f"{NGRAM}/8+"]
    assert model.rates(ngram_key(9, SUFFIX), 1)[0] == pytest.approx(
        accepted / (accepted + rejected)
    )


def test_a_key_names_its_source() -> None:
    for source in (CONTEXT, SUFFIX, EXTRA, SESSION):
        for match in (1, 3, 9):
            assert ngram_key_source(ngram_key(match, source)) == source
    assert ngram_key_source(ngram_key(FORCED_MATCH, SUFFIX)) == CONTEXT  # one forced key


def test_a_source_starts_from_what_its_band_measured_elsewhere() -> None:
    model = AcceptanceModel()
    plain = model.rates(ngram_key(3, EXTRA), 1)[0]
    for _ in range(30):
        model.update(ngram_key(3, SUFFIX), 1, 0)  # the suffix's 3-4 matches are always wrong
    pulled = model.rates(ngram_key(3, EXTRA), 1)[0]
    assert pulled < plain  # a source never seen borrows the band's evidence ...
    for _ in range(30):
        model.update(ngram_key(3, EXTRA), 1, 1)
    assert model.rates(ngram_key(3, EXTRA), 1)[0] > 0.8  # ... until its own counts take over
    assert model.rates(ngram_key(3, SUFFIX), 1)[0] < 0.2
    # without other sources (a request naming no regions) a key's rate is what it always was
    alone = AcceptanceModel()
    alone.update(ngram_key(3), 2, 1)
    a0, r0 = PRIORS[ngram_key(3)]
    assert alone.rates(ngram_key(3), 1)[0] == pytest.approx((1 + a0) / (1 + a0 + r0))


def test_a_lookup_within_intervals_takes_the_latest_occurrence_there_and_stops_at_its_end() -> None:
    index = NGramIndex(2, 4)
    index.extend([*PROMPT, 12, 13])  # the answer so far ends with 12 13
    # 12 13 occurs in the extra chunk (followed by 14) and in the suffix (followed by 40 41)
    assert index.lookup(8) == ([40, 41, 4, 12, 13], 2)  # the whole sequence: latest occurrence
    assert index.lookup(8, within=[(10, 16)]) == ([40, 41], 2)  # cut at the suffix's end
    assert index.lookup(8, within=[(1, 6)]) == ([14], 2)
    assert index.lookup(8, within=[(6, 10)]) == ([], 0)  # the prefix has no 12 13
    # the continuation must start inside: an occurrence ending on the interval's last
    # position continues outside it
    assert index.lookup(8, within=[(1, 5)]) == ([], 0)


def test_the_proposer_offers_one_lookup_per_source_and_the_session_cache() -> None:
    cache = NGramCache(n=2, min_count=1)
    cache.learn([12, 13, 99, 98])
    ngram = NGramProposer(2, 4, cache=cache)
    history = [*PROMPT, 12, 13]
    ngram.reset(history)
    found = ngram.lookups(history, DraftLimits(8), source_intervals(REGIONS, len(PROMPT)))
    by_source = {lookup.source: (lookup.match, lookup.draft.tokens) for lookup in found}
    assert by_source == {
        EXTRA: (2, [14]),
        SUFFIX: (2, [40, 41]),
        SESSION: (2, [99, 98]),
    }
    assert {lookup.draft.source for lookup in found} == {
        "ngram-extra",
        "ngram-suffix",
        "ngram-cache",
    }
    # no regions: the one lookup of the whole sequence, as the fixed `ngram` mode drafts
    plain = ngram.lookups(history, DraftLimits(8), {})
    assert [(lookup.source, lookup.draft.tokens) for lookup in plain[:1]] == [
        (CONTEXT, [40, 41, 4, 12, 13])
    ]


def auto_trusting(suffix: bool, extra: bool) -> AutoDrafter:
    """An auto step on PROMPT's regions whose tuner has seen each source's 2-token matches
    always accepted (True) or always rejected."""
    tuner = Tuner(CHEAP, explore=0.0, explore_ngram=False)
    for key, accepted in ((ngram_key(2, SUFFIX), suffix), (ngram_key(2, EXTRA), extra)):
        for _ in range(20):
            tuner.acceptance.update(key, 4, 4 if accepted else 0)
    auto = AutoDrafter(tuner, NGramProposer(2, 4))
    auto.start(PROMPT, REGIONS)
    return auto


@pytest.mark.parametrize(
    ("suffix", "extra", "key", "drafted"),
    [
        (True, False, ngram_key(2, SUFFIX), [40, 41]),
        (False, True, ngram_key(2, EXTRA), [14]),
        (False, False, NONE, []),
    ],
)
def test_auto_drafts_the_source_that_pays(
    suffix: bool, extra: bool, key: str, drafted: list[int]
) -> None:
    auto = auto_trusting(suffix, extra)
    draft, choice = propose(auto, [*PROMPT, 12, 13], 8, None)
    assert choice.key == key and draft.tokens == drafted


def test_the_sources_not_drafted_are_scored() -> None:
    auto = auto_trusting(suffix=True, extra=False)
    history = [*PROMPT, 12, 13]
    draft, choice = propose(auto, history, 8, None)
    assert (choice.proposer, draft.source) == (NGRAM, "ngram-suffix")
    seen = auto.tuner.acceptance.observations(ngram_key(2, EXTRA))
    auto.settle_shadows([*history, 14])  # the extra chunk's lookup was right this time
    assert auto.tuner.acceptance.observations(ngram_key(2, EXTRA)) > seen


def test_the_replay_looks_up_a_traces_regions_as_the_runtime_does() -> None:
    """The answer copies the extra chunk after `12 13`; the plain lookup finds the suffix's
    later `12 13` (followed by 40 41) instead. Only a lookup of the chunk can copy it."""
    prompt = (1, *range(10, 18), 2, 20, 3, 30, 12, 13, 40, 41, 4)
    output = (12, 13, 14, 15, 16, 17, 50, 51)
    regions = (Span(EXTRA, 1, 9), Span(SUFFIX, 12, 17))
    gpu = HardwareProfile(verify_s=tuple((1.0 + 0.0125 * b) * 1e-3 for b in range(16)))
    plain = Trace(prompt, output, (False,) * len(output), "fim")
    sourced = replace(plain, regions=regions)
    assert hindsight(sourced, gpu).accepted == 4  # 14 15 16 17 from the chunk
    assert hindsight(plain, gpu).accepted == 3  # the chunk only once `13 14` is out
    policy = AutoPolicy(gpu)
    assert replay(sourced, policy, gpu).tokens == len(output)
    learned = policy.tuner.acceptance
    assert learned.observations(ngram_key(2, EXTRA)) > 0
    assert learned.observations(ngram_key(2, SUFFIX)) > 0
