"""The measured payoff: realized over predicted speed per proposer, and how it keeps `auto`
from drafting where drafts lose (JSON's long matches followed by a value half the time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings
from localspec.speculative.payoff import Payoff
from localspec.speculative.tuner import NGRAM, NONE, HardwareProfile, Tuner, ngram_key

# verifying 2 tokens costs 1.6x one: a one-token draft pays above 60% acceptance
CPU = HardwareProfile(verify_s=(1.0, 1.6, 2.2, 2.8, 3.4, 4.0, 4.7, 6.6, 7.4))


def test_the_factor_is_one_until_steps_are_measured_and_while_they_go_as_predicted() -> None:
    payoff = Payoff()
    assert payoff.factor(NGRAM) == 1.0
    for _ in range(50):
        payoff.observe(NGRAM, 2, 0.2, expected_tokens=2.0, expected_seconds=0.2)
    assert payoff.factor(NGRAM) == pytest.approx(1.0)
    payoff.observe(NGRAM, 2, 0.0, 2.0, 0.2)  # no timing (a replay without one): ignored
    payoff.observe(NGRAM, 2, 0.2, 2.0, 0.0)
    assert payoff.factor(NGRAM) == pytest.approx(1.0)


def test_fewer_tokens_or_more_time_than_predicted_lower_the_factor() -> None:
    short, slow = Payoff(), Payoff()
    for _ in range(200):
        short.observe(NGRAM, 1, 1.6, expected_tokens=2.0, expected_seconds=1.6)
        slow.observe(NONE, 1, 1.5, expected_tokens=1.0, expected_seconds=1.0)
    assert short.factor(NGRAM) == pytest.approx(0.5, abs=0.02)
    assert slow.factor(NONE) == pytest.approx(1 / 1.5, abs=0.02)
    assert short.factor(NONE) == 1.0  # proposers are measured apart


def test_the_factor_follows_a_change_within_a_few_dozen_steps() -> None:
    payoff = Payoff()
    for _ in range(200):
        payoff.observe(NGRAM, 1, 1.0, 2.0, 1.0)
    for _ in range(60):
        payoff.observe(NGRAM, 2, 1.0, 2.0, 1.0)
    assert payoff.factor(NGRAM) > 0.85


def _long_match_believed(tuner: Tuner, rate: float) -> None:
    """Acceptance of 8+ matches at `rate` over 100 one-token observations (what edits teach)."""
    key = ngram_key(8)
    for i in range(100):
        tuner.acceptance.update(key, 1, int(i % 10 < rate * 10))


def test_auto_stops_drafting_where_the_measured_payoff_is_a_loss() -> None:
    """The acceptance model believes 90% (learned on edits); on this text a one-token draft
    is accepted half the time: 1.5 tokens for 1.6x the time of one. The measured payoff
    brings the draft under plain decoding, and it is no longer chosen."""
    tuner = Tuner(CPU, explore=0.0)
    _long_match_believed(tuner, 0.9)
    first = tuner.choose(ngram_match=8, ngram_available=1, draft_allowed=False)
    assert first.proposer == NGRAM and first.k == 1
    assert 1.8 < first.expected_tokens < 1.95
    assert first.modelled_tokens_per_s == first.predicted_tokens_per_s
    choice = first
    for step in range(40):
        if choice.proposer != NGRAM:
            break
        tuner.observe_step(choice, 1 + step % 2, CPU.verify(2))
        choice = tuner.choose(8, 1, False)
    assert choice.proposer == NONE
    assert step < 20  # noticed within a few steps


def test_a_draft_that_pays_as_predicted_keeps_being_chosen() -> None:
    tuner = Tuner(CPU, explore=0.0)
    _long_match_believed(tuner, 0.9)
    for step in range(100):
        choice = tuner.choose(8, 1, False)
        assert choice.proposer == NGRAM, step
        tuner.observe_step(choice, 2 if step % 10 else 1, CPU.verify(2))  # 90% accepted


def test_steps_slower_than_their_verification_count_against_the_draft() -> None:
    """Costs outside the verification decode (a step that takes 1.4x what the calibration
    says, where plain steps take what it says) are measured the same way."""
    tuner = Tuner(CPU, explore=0.0)
    _long_match_believed(tuner, 0.9)
    for step in range(40):
        tuner.observe_step(tuner.choose(0, 0, False), 1, CPU.verify(1))
        choice = tuner.choose(8, 1, False)
        if choice.proposer == NGRAM:
            tuner.observe_step(choice, 2 if step % 10 else 1, 1.4 * CPU.verify(2))
    assert tuner.choose(8, 1, False).proposer == NONE


def test_the_engine_measures_every_auto_step(tiny_target: Path) -> None:
    settings = RuntimeSettings(target=tiny_target, n_ctx=256, n_threads=1)
    with Runtime(settings) as runtime:
        prompt = runtime.tokenize("hello hello hello")
        list(runtime.generate(GenerationRequest(prompt, max_tokens=24, ignore_eos=True)))
        payoff = runtime._tuners["complete"].payoff
    assert payoff.factor(NONE) != 1.0  # plain steps were timed against their prediction
