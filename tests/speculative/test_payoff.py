"""The measured payoff: produced over expected tokens per source, and how it keeps `auto`
from drafting where drafts lose (JSON's long matches followed by a value half the time, an
editor session's cache of earlier answers); and stale verification costs following the
overall measured ratio."""

from __future__ import annotations

import pytest

from localspec.speculative.payoff import Payoff
from localspec.speculative.sources import EXTRA, SESSION, SUFFIX
from localspec.speculative.tuner import (
    DRAFT,
    NGRAM,
    NONE,
    Choice,
    HardwareProfile,
    Tuner,
    ngram_key,
    payoff_source,
)

# verifying 2 tokens costs 1.6x one: a one-token draft pays above 60% acceptance
CPU = HardwareProfile(verify_s=(1.0, 1.6, 2.2, 2.8, 3.4, 4.0, 4.7, 6.6, 7.4), draft_s=0.3)


def lookup(match: int, available: int) -> list[tuple[str, int]]:
    """One n-gram lookup of the sequence itself, as `Tuner.choose` takes it."""
    return [(ngram_key(match), available)] if available > 0 else []


def test_the_factor_is_one_until_drafts_are_measured_and_while_they_go_as_expected() -> None:
    payoff = Payoff()
    assert payoff.factor(NGRAM) == payoff.factor(NONE) == 1.0
    for _ in range(50):
        payoff.observe(NGRAM, 2, expected_tokens=2.0)
    assert payoff.factor(NGRAM) == pytest.approx(1.0)


def test_fewer_tokens_than_expected_lower_the_factor_and_it_recovers() -> None:
    payoff = Payoff()
    for _ in range(200):
        payoff.observe(NGRAM, 1, expected_tokens=2.0)
    assert payoff.factor(NGRAM) == pytest.approx(0.5, abs=0.02)
    assert payoff.factor(DRAFT) == 1.0  # proposers are measured apart
    for _ in range(60):
        payoff.observe(NGRAM, 2, 2.0)
    assert payoff.factor(NGRAM) > 0.85  # a change of text is followed within dozens


def _long_matches_believed(tuner: Tuner, rate: float) -> None:
    """Acceptance of 8+ matches at `rate` over 100 one-token observations (what edits teach)."""
    for i in range(100):
        tuner.acceptance.update(ngram_key(8), 1, int(i % 10 < rate * 10))


def _draft(tuner: Tuner, produced: int) -> Choice:
    """One step as AutoDrafter folds it in: the payoff first, then the acceptance model."""
    choice = tuner.choose(lookup(8, 1), False)
    if choice.proposer == NGRAM:
        tuner.observe_step(choice, produced)
        tuner.observe(choice, 1, produced - 1)
    return choice


def test_auto_stops_drafting_where_drafts_yield_less_than_the_model_believes() -> None:
    """The acceptance model believes 90% (learned on edits); on this text a one-token draft
    is accepted half the time: 1.5 tokens for 1.6x the time of one. The measured payoff
    brings the draft under plain decoding long before the model itself has forgotten."""
    tuner = Tuner(CPU, explore=0.0)
    _long_matches_believed(tuner, 0.9)
    first = tuner.choose(lookup(8, 1), False)
    assert first.proposer == NGRAM and first.k == 1
    assert first.modelled_tokens_per_s == first.predicted_tokens_per_s
    for step in range(40):
        if _draft(tuner, 1 + step % 2).proposer != NGRAM:
            break
    assert step < 25
    assert tuner.acceptance.rates(ngram_key(8), 1)[0] > 0.65  # the model alone still drafts
    assert tuner.choose(lookup(8, 1), False).proposer == NONE


def test_a_draft_that_yields_what_the_model_expects_keeps_being_chosen() -> None:
    tuner = Tuner(CPU, explore=0.0)
    _long_matches_believed(tuner, 0.9)
    for step in range(100):
        assert _draft(tuner, 2 if step % 10 else 1).proposer == NGRAM, step  # 90% accepted


def test_a_draft_models_expected_yield_is_that_of_the_length_it_drafted() -> None:
    tuner = Tuner(CPU, explore=0.0)
    long = Choice(DRAFT, 8, DRAFT, 1.0, modelled_tokens_per_s=1.0)  # the stop ran past k
    for _ in range(30):
        tuner.observe_step(long, 9)
        tuner.observe(long, 8, 8, (0.99,) * 8)
    assert tuner.payoff.factor(DRAFT) == pytest.approx(1.0, abs=0.3)
    tuner.observe_step(Choice(DRAFT, 0, DRAFT, 1.0), 1)  # an empty draft teaches nothing
    tuner.observe_step(Choice(NONE, 0, NONE, 1.0), 1)
    assert tuner.payoff.factor(NONE) == 1.0


def test_a_batch_size_measured_in_a_slow_moment_follows_the_overall_ratio() -> None:
    """Plain steps measured 30x slower than calibrated (the first steps after loading),
    then only drafts: plain decoding's cost comes back to what the machine shows now."""
    tuner = Tuner(CPU, explore=0.0)
    plain = Choice(NONE, 0, NONE, 1.0)
    for _ in range(5):
        tuner.observe_costs(plain, 0, 0.0, verify_seconds=30 * CPU.verify(1))
    assert tuner.verify_cost(1) > 10 * CPU.verify(1)
    drafted = Choice(NGRAM, 2, ngram_key(8), 1.0)
    for _ in range(150):
        tuner.observe_costs(drafted, 2, 0.0, verify_seconds=CPU.verify(3))
    assert tuner.verify_cost(1) == pytest.approx(CPU.verify(1), rel=0.05)
    assert tuner.verify_cost(3) == pytest.approx(CPU.verify(3), rel=0.01)


def _believed(tuner: Tuner, key: str, rate: float) -> None:
    """Acceptance of `key` at `rate` over 100 one-token observations (what shadows teach)."""
    for i in range(100):
        tuner.acceptance.update(key, 1, int(i % 10 < rate * 10))


def _one_step(tuner: Tuner, key: str, produced: int) -> Choice:
    """A step whose only lookup is `key`; a chosen draft produces `produced` tokens."""
    choice = tuner.choose([(key, 1)], draft_allowed=False)
    if choice.proposer == NGRAM:
        tuner.observe_step(choice, produced)
        tuner.observe(choice, 1, produced - 1)
    return choice


def test_each_ngram_source_is_judged_by_its_own_payoff() -> None:
    """The suffix's drafts yield what is expected, the session cache's are always rejected
    (both promised 90% by their shadows): the session's stop being chosen, the suffix's go
    on. Under one factor for every n-gram source, the session's losses dropped both."""
    tuner = Tuner(CPU, explore=0.0)
    suffix, session = ngram_key(8, SUFFIX), ngram_key(8, SESSION)
    _believed(tuner, suffix, 0.9)
    _believed(tuner, session, 0.9)
    for step in range(40):
        _one_step(tuner, suffix, 2 if step % 10 else 1)
        _one_step(tuner, session, 1)
    assert tuner.choose([(session, 1)], False).proposer == NONE
    assert tuner.choose([(suffix, 1)], False).proposer == NGRAM
    assert tuner.payoff.factor(payoff_source(NGRAM, session)) < 0.9
    assert tuner.payoff.factor(payoff_source(NGRAM, suffix)) > 0.95


def test_payoff_sources() -> None:
    assert payoff_source(NGRAM, ngram_key(3)) == NGRAM  # the sequence itself
    assert payoff_source(NGRAM, ngram_key(9, SUFFIX)) == "ngram/suffix"
    assert payoff_source(NGRAM, ngram_key(2, EXTRA)) == "ngram/extra"
    assert payoff_source(NGRAM, ngram_key(4, SESSION)) == "ngram/session"
    assert payoff_source(DRAFT, DRAFT) == DRAFT


def test_a_lookup_no_length_of_which_pays_is_offered_at_its_own_speed() -> None:
    """At 50% acceptance a one-token draft yields 1.5 tokens for 1.6x the time: it loses.
    The option keeps that speed (offered at plain decoding's, as a length of 0 once was,
    it tied with plain decoding, and any payoff above 1 made it win)."""
    tuner = Tuner(CPU, explore=0.0)
    weak = ngram_key(2, SUFFIX)
    _believed(tuner, weak, 0.5)
    [plain, option] = tuner.options_for([(weak, 1)], draft_allowed=False)
    assert option.k == 1
    assert option.modelled_tokens_per_s == pytest.approx(1.5 / CPU.verify(2), rel=0.05)
    assert option.predicted_tokens_per_s < plain.predicted_tokens_per_s
    assert tuner.choose([(weak, 1)], False).proposer == NONE


def test_drafts_that_yield_more_than_expected_never_lift_their_source() -> None:
    """One fully accepted long draft (9 tokens where 3 were expected) leaves the factor at 1:
    the acceptance model learns the higher rate itself."""
    payoff = Payoff()
    payoff.observe("ngram/session", 9, 3.0)
    assert payoff.factor("ngram/session") == 1.0
    for _ in range(5):
        payoff.observe("ngram/session", 1, 3.0)
    assert payoff.factor("ngram/session") < 0.8  # the losses after it count in full
