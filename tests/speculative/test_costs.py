"""Live costs: the tuner prices steps as this process (and the ones before it) measured them."""

from __future__ import annotations

import pytest

from localspec.speculative.costs import ExplorationBudget, LiveCosts
from localspec.speculative.tuner import NGRAM, NONE, Choice, HardwareProfile, Tuner, ngram_key

# calibrated: verifying 2 tokens costs 1.5x one, so a one-token draft at ~98% looks like 1.3x
CALIBRATED = HardwareProfile(verify_s=(0.04, 0.06, 0.075, 0.09, 0.105, 0.12, 0.135, 0.15, 0.165))
KEY = ngram_key(8)


def _well_accepted(tuner: Tuner) -> None:
    for _ in range(60):
        tuner.acceptance.update(KEY, 1, 1)
    tuner.acceptance.update(KEY, 1, 0)


def test_a_one_token_draft_that_does_not_pay_as_measured_stops_being_chosen() -> None:
    tuner = Tuner(CALIBRATED, explore=0.0)
    _well_accepted(tuner)
    assert tuner.choose([(KEY, 1)], False).proposer == NGRAM  # the calibration's promise
    plain, drafted = Choice(NONE, 0, NONE, 0.0), Choice(NGRAM, 1, KEY, 0.0)
    chosen = []
    for _ in range(12):
        # as measured here: plain steps as calibrated, a 2-token batch 2.1x a plain step
        tuner.observe_costs(plain, 0, 0.0, 0.04, (1,))
        tuner.observe_costs(drafted, 1, 0.0, 0.084, (2,))
        chosen.append(tuner.choose([(KEY, 1)], False).proposer)
    assert chosen[-4:] == [NONE] * 4
    assert tuner.verify_cost(2) / tuner.verify_cost(1) > 2.0


def test_longer_drafts_are_chosen_where_acceptance_pays_within_exact_width_chunks() -> None:
    tuner = Tuner(CALIBRATED, explore=0.0)
    _well_accepted(tuner)
    for _ in range(60):
        tuner.acceptance.update(KEY, 8, 8)
    choice = tuner.choose([(KEY, 8)], False, chunk=3)
    assert choice.proposer == NGRAM and choice.k >= 2


def test_nothing_is_drafted_where_each_drafted_token_is_verified_alone() -> None:
    """Exact width 1 (this CPU's flash attention in long contexts): a drafted token costs the
    one-token decode plain decoding would make for it, so even a lookup accepted every time
    only ties with plain decoding (it won on rounding: 177 of 256 greedy tokens drafted for
    nothing), and only plain decoding is offered. In one batch the same lookup pays."""
    tuner = Tuner(CALIBRATED, explore=0.0)
    for _ in range(60):
        tuner.acceptance.update(KEY, 8, 8)
    assert [c.proposer for c in tuner.options_for([(KEY, 8)], False, chunk=1)] == [NONE]
    assert tuner.choose([(KEY, 8)], False, chunk=1).proposer == NONE
    assert tuner.choose([(KEY, 8)], False).proposer == NGRAM


def test_live_costs_read_back_what_they_wrote() -> None:
    costs = LiveCosts(catchup_s=0.004)
    for _ in range(5):
        costs.observe_verify((1,), 0.05, 0.04)
        costs.observe_verify((2,), 0.12, 0.06)
        costs.observe_empty(True)
    again = LiveCosts.from_dict(costs.to_dict(), catchup_s=1.0)
    assert again.verify_ratio == pytest.approx(costs.verify_ratio)
    assert again.overall_ratio == pytest.approx(costs.overall_ratio)
    assert again.empty_rate == pytest.approx(costs.empty_rate)
    assert again.catchup_s == pytest.approx(0.004)
    assert again.measured_at == {1: 0, 2: 0}  # old measurements go stale like any other
    assert "ties" not in costs.to_dict()


def test_a_record_of_an_older_version_with_a_near_tie_rate_is_read() -> None:
    """Older versions priced near-tie re-decodes, which verification no longer makes, and
    wrote their rate as `ties`: the record still loads, the rate ignored."""
    record = LiveCosts(overall_ratio=1.5).to_dict() | {"ties": [0.2, 10.0]}
    assert LiveCosts.from_dict(record, catchup_s=0.0).overall_ratio == pytest.approx(1.5)


@pytest.mark.parametrize(
    "record",
    [
        {},
        {"verify_ratio": [1, 2]},
        {
            "verify_ratio": {"0": 1.0},
            "overall_ratio": 1,
            "draft_overhead_s": 0,
            "draft_empty": [0, 1],
        },
        {
            "verify_ratio": {},
            "overall_ratio": "x",
            "draft_overhead_s": 0,
            "draft_empty": [0, 1],
        },
        {
            "verify_ratio": {},
            "overall_ratio": 1,
            "draft_overhead_s": 0,
            "draft_empty": [0, 0],
        },
    ],
)
def test_a_record_that_is_not_one_is_refused(record: dict[str, object]) -> None:
    with pytest.raises((KeyError, TypeError, ValueError, AttributeError)):
        LiveCosts.from_dict(record, catchup_s=0.0)


def test_ratios_read_back_are_bounded() -> None:
    record = LiveCosts().to_dict() | {"verify_ratio": {"1": 1e9}, "overall_ratio": 0.0}
    costs = LiveCosts.from_dict(record, catchup_s=0.0)
    assert 1.0 < costs.ratio(1) <= 20.0 and 0.0 < costs.overall_ratio < 1.0


def test_a_budget_spends_only_what_fits() -> None:
    budget = ExplorationBudget(1.0)
    assert budget.spend(0.6) and not budget.spend(0.6) and budget.spend(0.4)
    assert budget.left == pytest.approx(0.0) and budget.spent == pytest.approx(1.0)


def test_loading_the_draft_is_part_of_switching_to_it() -> None:
    """A draft that repays its catch-up within the horizon may not repay loading it too."""
    cheap = HardwareProfile(CALIBRATED.verify_s, draft_s=0.004, catchup_s=0.001)
    tuner = Tuner(cheap, explore=0.0)
    loaded = tuner.options_for([], True, draft_behind=40, remaining=256)
    assert "draft" in {c.proposer for c in loaded}
    tuner.costs.draft_load_s = 60.0
    unloaded = tuner.options_for([], True, draft_behind=40, remaining=256, draft_loaded=False)
    assert "draft" not in {c.proposer for c in unloaded}
    assert tuner.options_for([], True, draft_behind=40, remaining=256) == loaded
    tuner.costs.draft_load_s = 0.0
    record = LiveCosts.from_dict(tuner.costs.to_dict(), catchup_s=0.0)
    assert record.draft_load_s == 0.0
