"""The tuner's arithmetic and decisions, checked on plain numbers: no model, no timing."""

from __future__ import annotations

import pytest

from localspec.speculative.tuner import (
    DEFAULT_HORIZON,
    DRAFT,
    NGRAM,
    NONE,
    PRIORS,
    AcceptanceModel,
    Choice,
    HardwareProfile,
    Tuner,
    confidence_key,
    expected_tokens,
    ngram_bucket,
    ngram_key,
)

# Measured on a 2-core CI machine (NOTES.md): verifying b tokens costs verify_s[b - 1] seconds.
CPU = HardwareProfile(
    verify_s=(0.078, 0.134, 0.177, 0.188, 0.254, 0.323, 0.319, 0.48, 0.513), draft_s=0.042
)
# A GPU where a batch of 16 costs 1.19x one token and a draft token 0.1x.
GPU = HardwareProfile(verify_s=tuple((1.0 + 0.0125 * b) * 1e-3 for b in range(16)), draft_s=0.1e-3)


def lookup(match: int, available: int) -> list[tuple[str, int]]:
    """One n-gram lookup of the sequence itself, as `Tuner.choose` takes it."""
    return [(ngram_key(match), available)] if available > 0 else []


def observe_many(tuner: Tuner, key: str, drafted: int, accepted: int, times: int) -> None:
    proposer = DRAFT if key == DRAFT else NGRAM
    for _ in range(times):
        tuner.observe(Choice(proposer, drafted, key, 0.0), drafted, accepted)


# --- expected_tokens -------------------------------------------------------------------------


def test_expected_tokens_counts_the_bonus_token_and_each_surviving_prefix() -> None:
    assert expected_tokens([]) == 1.0
    assert expected_tokens([1.0, 1.0, 1.0]) == 4.0
    assert expected_tokens([0.5, 0.5]) == pytest.approx(1.0 + 0.5 + 0.25)
    assert expected_tokens([0.8, 0.5, 1.0]) == pytest.approx(1.0 + 0.8 + 0.4 + 0.4)


def test_a_rejected_position_makes_everything_after_it_worthless() -> None:
    assert expected_tokens([0.0, 1.0, 1.0]) == 1.0
    assert expected_tokens([1.0, 0.0, 1.0]) == 2.0


def test_expected_tokens_of_a_constant_rate_is_a_geometric_sum() -> None:
    rate, k = 0.9, 8
    assert expected_tokens([rate] * k) == pytest.approx((1 - rate ** (k + 1)) / (1 - rate))


# --- HardwareProfile -------------------------------------------------------------------------


def test_verify_reads_measured_batches_directly() -> None:
    assert CPU.verify(1) == 0.078
    assert CPU.verify(4) == 0.188
    assert CPU.verify(9) == 0.513


def test_verify_extends_the_last_measured_slope() -> None:
    slope = 0.513 - 0.48
    assert CPU.verify(10) == pytest.approx(0.513 + slope)
    assert CPU.verify(12) == pytest.approx(0.513 + 3 * slope)


def test_verify_never_extrapolates_a_falling_cost() -> None:
    profile = HardwareProfile((0.1, 0.3, 0.25))
    assert profile.verify(5) == 0.25


def test_verify_of_a_single_measurement_extends_the_line_through_zero() -> None:
    profile = HardwareProfile((0.05,))
    assert profile.verify(3) == pytest.approx(0.15)


def test_on_the_cpu_a_perfect_draft_pays_only_past_any_usable_length() -> None:
    # k = 3 comes closest within measured batches: 4 tokens in 0.188 + 3 * 0.042 s is 0.6%
    # short of plain decoding's 1 / 0.078 tok/s.
    best_measured = 4 / (CPU.verify(4) + 3 * 0.042)
    assert 0.99 < best_measured * CPU.verify(1) < 1.0
    for k_max in (1, 3, 8, 16, 32, 64):
        assert not CPU.draft_can_ever_pay(k_max)
    # Without the default 10% margin, the extrapolated slope (0.033 s per token plus 0.042 per
    # draft token, against 0.078 for a plain token) makes drafts in the high fifties "pay":
    # an artifact of extrapolating far past the measurements that no tuner k_max reaches.
    assert CPU.draft_can_ever_pay(64, margin=1.0)
    assert not CPU.draft_can_ever_pay(32, margin=1.0)


def test_a_draft_as_slow_as_the_target_can_never_pay() -> None:
    slow = HardwareProfile(CPU.verify_s, draft_s=CPU.verify(1))
    assert not slow.draft_can_ever_pay(1000)


def test_without_a_draft_model_drafting_never_pays() -> None:
    assert not HardwareProfile(GPU.verify_s).draft_can_ever_pay(16)


def test_on_the_gpu_a_draft_pays_at_once() -> None:
    assert GPU.draft_can_ever_pay(1)


def test_profile_round_trips_through_a_dict() -> None:
    assert HardwareProfile.from_dict(CPU.to_dict()) == CPU
    assert HardwareProfile.from_dict({"verify_s": [0.1]}) == HardwareProfile((0.1,))
    measured = HardwareProfile((0.03, 0.05), 0.02, (0.0, 0.1), catchup_s=0.004)
    assert HardwareProfile.from_dict(measured.to_dict()) == measured


def test_a_measured_catch_up_replaces_the_prior() -> None:
    """Before any step has caught up, the tuner prices it from the profile where measured."""
    prior = Tuner(HardwareProfile((0.03, 0.05), 0.02))
    measured = Tuner(HardwareProfile((0.03, 0.05), 0.02, catchup_s=0.001))
    assert prior.catchup_cost(102) == pytest.approx(100 * 0.02 * 0.35)
    assert measured.catchup_cost(102) == pytest.approx(100 * 0.001)


# --- AcceptanceModel -------------------------------------------------------------------------


def test_rates_before_any_data_are_the_priors() -> None:
    model = AcceptanceModel()
    assert model.rates(f"{NGRAM}/8+", 3) == pytest.approx([0.8] * 3)
    assert model.rates(f"{NGRAM}/1", 2) == pytest.approx([0.25] * 2)
    assert model.rates(DRAFT, 1) == pytest.approx([0.8])
    assert model.rates("unknown", 2) == pytest.approx([0.5, 0.5])
    assert model.observations(DRAFT) == 0.0


def test_priors_trust_long_matches_more_than_short_ones() -> None:
    mean = {key: a / (a + r) for key, (a, r) in PRIORS.items()}
    buckets = [f"{NGRAM}/{b}" for b in ("1", "2", "3-4", "5-7", "8+")]
    assert [mean[b] for b in buckets] == sorted(mean[b] for b in buckets)


def test_ngram_bucket_bands() -> None:
    assert [ngram_bucket(n) for n in (0, 1, 2, 3, 4, 5, 7, 8, 12)] == [
        "0",
        "1",
        "2",
        "3-4",
        "3-4",
        "5-7",
        "5-7",
        "8+",
        "8+",
    ]


def test_positions_after_the_first_rejection_are_not_counted() -> None:
    model = AcceptanceModel(decay=1.0)
    model.update("x", drafted=4, accepted=2)
    assert model.counts["x"][:4] == [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    # prior (1, 1) for an unknown key: (accepted + 1) / (tried + 2), untouched at position 4
    assert model.rates("x", 4) == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 2])


def test_a_fully_accepted_draft_counts_every_position_and_nothing_past_it() -> None:
    model = AcceptanceModel(decay=1.0)
    model.update("x", drafted=3, accepted=3)
    assert model.counts["x"][:4] == [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert model.observations("x") == 1.0


def test_old_observations_decay_before_new_ones_are_added() -> None:
    model = AcceptanceModel(decay=0.5)
    model.update("x", drafted=1, accepted=1)
    model.update("x", drafted=1, accepted=0)
    assert model.counts["x"][0] == pytest.approx([0.5, 1.5])
    assert model.observations("x") == pytest.approx(1.5)


def test_decay_is_counted_in_updates_of_the_same_key_only() -> None:
    model = AcceptanceModel(decay=0.5)
    model.update("a", drafted=1, accepted=1)
    model.update("b", drafted=1, accepted=1)
    assert model.observations("a") == 1.0


def test_drafts_longer_than_the_tracked_positions_are_cut() -> None:
    model = AcceptanceModel(max_positions=2, decay=1.0)
    model.update("x", drafted=5, accepted=5)
    assert model.counts["x"] == [[1.0, 1.0], [1.0, 1.0]]
    assert model.rates("x", 3) == pytest.approx([2 / 3, 2 / 3, 1 / 2])


# --- Tuner -----------------------------------------------------------------------------------


def test_plain_decoding_wins_when_acceptance_is_low_and_batches_expensive() -> None:
    tuner = Tuner(CPU, explore=0.0)
    observe_many(tuner, f"{NGRAM}/2", drafted=4, accepted=0, times=10)
    observe_many(tuner, DRAFT, drafted=4, accepted=1, times=10)
    choice = tuner.choose(lookup(2, 8), True)
    assert choice.proposer == NONE
    assert choice.label == NONE
    assert choice.predicted_tokens_per_s == pytest.approx(1 / CPU.verify(1))


def test_short_matches_do_not_draft_on_the_cpu_even_before_observation() -> None:
    best = max(
        Tuner(CPU).options_for([(ngram_key(1), 8)], True), key=lambda c: c.predicted_tokens_per_s
    )
    assert best.proposer == NONE


def test_long_matches_draft_once_their_acceptance_is_observed_high() -> None:
    tuner = Tuner(CPU, explore=0.0)
    observe_many(tuner, f"{NGRAM}/8+", drafted=8, accepted=8, times=20)
    choice = tuner.choose(lookup(10, 8), True)
    assert (choice.proposer, choice.key) == (NGRAM, f"{NGRAM}/8+")
    # verify(4) is this machine's cheap batch: 4 tokens for 2.4x the time of one
    assert choice.k == 3
    assert choice.predicted_tokens_per_s > 1.5 / CPU.verify(1)


def test_the_gpu_drafts_long_from_the_priors_alone() -> None:
    choice = Tuner(GPU, explore=0.0).choose(lookup(0, 0), True)
    assert choice.proposer == DRAFT and choice.k >= 5


def test_ngram_available_bounds_the_draft_length() -> None:
    tuner = Tuner(GPU, explore=0.0)
    observe_many(tuner, f"{NGRAM}/8+", drafted=8, accepted=8, times=20)
    for available in (1, 3, 5, 8):
        choice = tuner.choose(lookup(9, available), False)
        assert (choice.proposer, choice.k) == (NGRAM, available)
    assert [c.proposer for c in tuner.options_for([], False)] == [NONE]


def test_the_draft_model_is_offered_only_when_allowed_and_present() -> None:
    assert DRAFT not in [c.proposer for c in Tuner(GPU).options_for([], False)]
    no_draft = HardwareProfile(GPU.verify_s)
    assert DRAFT not in [c.proposer for c in Tuner(no_draft).options_for([], True)]


def choices_of(tuner: Tuner, steps: int) -> list[Choice]:
    """Steps with a 2-token n-gram match: on the CPU its prior loses to plain decoding."""
    return [tuner.choose(lookup(2, 4), True) for _ in range(steps)]


def test_rarely_observed_options_are_explored_about_a_quarter_of_the_time() -> None:
    # on the CPU plain decoding is best, so every n-gram step is exploration
    found = choices_of(Tuner(CPU, seed=3), 400)
    explored = [c for c in found if c.explored]
    assert all(c.proposer == NGRAM for c in explored)
    assert all(c.proposer == NONE for c in found if not c.explored)
    assert 70 <= len(explored) <= 130


def test_well_observed_options_are_explored_at_the_explore_rate() -> None:
    tuner = Tuner(CPU, explore=0.05, seed=3)
    observe_many(tuner, f"{NGRAM}/2", drafted=1, accepted=0, times=10)
    explored = sum(c.explored for c in choices_of(tuner, 1000))
    assert 25 <= explored <= 80


def test_a_draft_that_cannot_pay_even_when_always_accepted_is_never_explored() -> None:
    assert not CPU.draft_can_ever_pay(8)
    assert all(
        c.proposer != DRAFT
        for c in [Tuner(CPU, seed=s).choose(lookup(0, 0), True) for s in range(200)]
    )


def test_exploration_is_deterministic_for_a_seed() -> None:
    assert choices_of(Tuner(CPU, seed=7), 200) == choices_of(Tuner(CPU, seed=7), 200)
    assert choices_of(Tuner(CPU, seed=7), 200) != choices_of(Tuner(CPU, seed=8), 200)


def test_plain_steps_and_empty_drafts_teach_nothing() -> None:
    tuner = Tuner(CPU)
    tuner.observe(Choice(NONE, 0, NONE, 0.0), 0, 0)
    tuner.observe(Choice(NGRAM, 3, f"{NGRAM}/2", 0.0), 0, 0)
    assert tuner.acceptance.counts == {}


# --- measured costs ---------------------------------------------------------------------------


def test_measured_verify_times_replace_the_calibration() -> None:
    """A batch that turns out twice as slow as calibrated stops being chosen."""
    tuner = Tuner(CPU, explore=0.0)
    observe_many(tuner, f"{NGRAM}/8+", drafted=3, accepted=3, times=20)
    assert tuner.choose(lookup(10, 3), False).k == 3
    choice = Choice(NGRAM, 3, f"{NGRAM}/8+", 0.0)
    for _ in range(20):
        tuner.observe_costs(choice, 3, 0.0, verify_seconds=2.5 * CPU.verify(4))
        tuner.observe_costs(Choice(NONE, 0, NONE, 0.0), 0, 0.0, verify_seconds=CPU.verify(1))
    assert tuner.verify_cost(4) == pytest.approx(2.5 * CPU.verify(4), rel=0.02)
    assert tuner.verify_cost(1) == pytest.approx(CPU.verify(1), rel=0.02)
    # 4 tokens for 2.5 x 0.188 s is slower than 1 token per 0.078 s
    assert tuner.choose(lookup(10, 3), False).k < 3


def test_a_draft_that_costs_more_than_calibrated_is_dropped() -> None:
    """The GPU profile drafts long from its priors; a draft whose steps measure 40 x the
    calibrated cost (say it catches up on many tokens each time) no longer pays."""
    tuner = Tuner(GPU, explore=0.0)
    first = tuner.choose(lookup(0, 0), True)
    assert first.proposer == DRAFT
    for _ in range(30):
        tuner.observe(first, first.k, first.k - 1)
        slow = first.k * GPU.draft_s * 40  # type: ignore[operator]
        tuner.observe_costs(first, first.k, slow, verify_seconds=GPU.verify(first.k + 1))
    assert tuner.choose(lookup(0, 0), True).proposer == NONE


# --- the draft model's tuned early stop ------------------------------------------------------

CHEAP_DRAFT_CPU = HardwareProfile(verify_s=CPU.verify_s, draft_s=0.012)


def test_confidence_bands() -> None:
    keys = [confidence_key(p) for p in (0.99, 0.9, 0.8, 0.6, 0.4, 0.1, 0.0)]
    assert (
        keys
        == [f"{DRAFT}@{band}" for band in ("90+", "90+", "70-90", "50-70", "30-50")]
        + [f"{DRAFT}@0-30"] * 2
    )
    rates = [PRIORS[k][0] / sum(PRIORS[k]) for k in dict.fromkeys(keys)]
    assert rates == sorted(rates, reverse=True)  # a surer draft is trusted more from the start


def test_observed_confidences_teach_their_bands_up_to_the_first_rejection() -> None:
    tuner = Tuner(CPU)
    # drafted 4 tokens, the first two accepted: the third is the rejection, the fourth unseen
    tuner.observe(Choice(DRAFT, 4, DRAFT, 0.0), 4, 2, (0.95, 0.8, 0.4, 0.95))
    counts = tuner.acceptance.counts
    assert counts[confidence_key(0.95)][0] == [1.0, 1.0]
    assert counts[confidence_key(0.8)][0] == [1.0, 1.0]
    assert counts[confidence_key(0.4)][0] == [0.0, 1.0]


def test_the_stop_keeps_sure_tokens_and_cuts_doubtful_ones_where_batches_are_dear() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    choice = tuner.choose(lookup(0, 0), True)
    assert choice.proposer == DRAFT
    stop = tuner.draft_stop(choice, 8)
    assert stop(0, 0.97) and stop(1, 0.95)
    assert not stop(2, 0.1)


def test_the_stop_drafts_through_doubt_where_batches_are_nearly_free() -> None:
    tuner = Tuner(GPU, explore=0.0)
    choice = tuner.choose(lookup(0, 0), True)
    stop = tuner.draft_stop(choice, 8)
    assert stop(0, 0.97) and stop(1, 0.45) and stop(2, 0.95)


def test_learned_acceptance_moves_the_stop() -> None:
    tuner = Tuner(GPU, explore=0.0)
    choice = tuner.choose(lookup(0, 0), True)
    assert tuner.draft_stop(choice, 8)(0, 0.8)
    for _ in range(30):  # the 70-90% band turns out to be rejected on this workload
        tuner.acceptance.update(confidence_key(0.8), 1, 0)
    assert not tuner.draft_stop(choice, 8)(0, 0.8)


def test_the_stop_never_passes_its_limit_or_the_tuners_k_max() -> None:
    tuner = Tuner(GPU, explore=0.0, k_max=4)
    stop = tuner.draft_stop(tuner.choose(lookup(0, 0), True), 16)
    assert [stop(i, 0.99) for i in range(6)] == [True] * 4 + [False] * 2


def test_an_explored_draft_is_not_stopped_early() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    explored = Choice(DRAFT, 3, DRAFT, 1.0, explored=True)
    stop = tuner.draft_stop(explored, 8)
    assert [stop(i, 0.01) for i in range(5)] == [True, True, True, False, False]


def test_drafts_the_stop_keeps_emptying_make_the_draft_model_lose() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    assert tuner.choose(lookup(0, 0), True).proposer == DRAFT
    assert tuner.empty_draft_rate() == pytest.approx(0.1)  # the prior
    for _ in range(40):  # the stop cut every draft before its first token
        empty = Choice(DRAFT, 0, DRAFT, 0.0)
        tuner.observe(empty, 0, 0)
        # which still cost the draft its catching up on the last step's tokens
        tuner.observe_costs(empty, 0, draft_seconds=0.03, verify_seconds=CPU.verify_s[0])
    assert tuner.empty_draft_rate() > 0.8
    assert tuner.choose(lookup(0, 0), True).proposer == NONE
    assert tuner.acceptance.counts == {}  # an empty draft says nothing about acceptance


def test_explored_drafts_do_not_count_as_empty() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU)
    for _ in range(10):
        tuner.observe(Choice(DRAFT, 0, DRAFT, 0.0, explored=True), 0, 0)
    assert tuner.empty_draft_rate() == pytest.approx(0.1)


# --- the draft model's catching up -------------------------------------------------------------


def test_far_behind_the_draft_is_offered_only_if_the_rest_of_the_answer_repays_it() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    assert tuner.choose(lookup(0, 0), True, draft_behind=2, remaining=50).proposer == DRAFT
    # 20 tokens to process at ~4 ms each cost more than 30 tokens can save (~2 ms each)
    near = tuner.options_for([], True, draft_behind=20, remaining=30)
    assert DRAFT not in {c.proposer for c in near}
    assert tuner.choose(lookup(0, 0), True, draft_behind=20, remaining=5000).proposer == DRAFT


def test_a_catch_up_must_repay_itself_within_the_horizon_whatever_the_token_budget() -> None:
    """Agents ask for 32000 tokens and stop after a few hundred: a 600-token catch-up that
    only a 5000-token answer would repay is not made."""
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    for budget in (DEFAULT_HORIZON, 5000, 32000):
        far = tuner.options_for([], True, draft_behind=600, remaining=budget)
        assert DRAFT not in {c.proposer for c in far}


def test_on_a_gpu_catching_up_is_cheap_enough_to_return_at_once() -> None:
    tuner = Tuner(GPU, explore=0.0)
    assert tuner.choose(lookup(0, 0), True, draft_behind=2000, remaining=256).proposer == DRAFT


def test_catch_up_cost_is_learned_from_steps_that_caught_up() -> None:
    tuner = Tuner(CHEAP_DRAFT_CPU, explore=0.0)
    assert tuner.catchup_cost(102) == pytest.approx(100 * 0.012 * 0.35)
    caught_up = Choice(DRAFT, 3, DRAFT, 0.0, draft_behind=102)
    for _ in range(30):  # catching up on 100 tokens took 1.0 s beyond the 3 draft tokens
        tuner.observe_costs(caught_up, 3, draft_seconds=3 * 0.012 + 1.0, verify_seconds=0.188)
    assert tuner.catchup_cost(102) == pytest.approx(1.0, rel=0.01)
    assert tuner.draft_cost(3) == pytest.approx(3 * 0.012)  # steady steps cost what they did


# the shipped 2-core profile's verification costs (1-9 tokens) and draft token, in seconds
SHIPPED_CPU = HardwareProfile(
    verify_s=(0.0684, 0.1037, 0.1227, 0.1227, 0.1384, 0.1602, 0.1798, 0.1890, 0.2033),
    draft_s=0.0343,
)


def test_the_stop_prices_each_further_chunk_where_verification_decodes_chunks() -> None:
    """Greedy verification decodes exact-width chunks of 3 on this CPU: a third draft token
    starts a chunk (a whole one-token decode) where a wider batch would cost nothing more
    (4 tokens verify as fast as 3 here). Sure tokens are drafted to the chunk's end only."""
    for chunk, drafts_a_third in ((None, True), (3, False)):
        tuner = Tuner(SHIPPED_CPU, explore=0.0)
        for _ in range(100):  # a pair that agrees on nearly everything (the real one on JSON)
            tuner.observe(Choice(DRAFT, 8, DRAFT, 0.0), 8, 8, (0.99,) * 8)
        choice = Choice(DRAFT, 2, DRAFT, 14.7, modelled_tokens_per_s=14.7)
        stop = tuner.draft_stop(choice, 8, chunk)
        assert stop(0, 0.99) and stop(1, 0.99)
        assert stop(2, 0.99) is drafts_a_third, chunk
    assert tuner.batch_cost(7, 3) == pytest.approx(2 * tuner.verify_cost(3) + tuner.verify_cost(1))
    assert tuner.batch_cost(7) == tuner.verify_cost(7)


def test_a_loaded_machine_prices_draft_tokens_with_the_same_measured_slowdown() -> None:
    """Other work on the machine slows every decode 5x: a draft token costs 5x as well,
    so sure drafts still end at the chunk's end instead of running on because verification
    looks dear beside a draft priced at its quiet calibration."""
    tuner = Tuner(SHIPPED_CPU, explore=0.0)
    for _ in range(100):
        tuner.observe(Choice(DRAFT, 8, DRAFT, 0.0), 8, 8, (0.99,) * 8)
        tuner.observe_costs(Choice(NONE, 0, NONE, 0.0), 0, 0.0, 5 * SHIPPED_CPU.verify(1))
    assert tuner.draft_token_cost() == pytest.approx(5 * 0.0343, rel=0.01)
    plain = 1.0 / tuner.verify_cost(1)
    stop = tuner.draft_stop(Choice(DRAFT, 2, DRAFT, plain, modelled_tokens_per_s=plain), 8, 3)
    assert stop(0, 0.99) and stop(1, 0.99) and not stop(2, 0.99)
