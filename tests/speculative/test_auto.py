"""AutoDrafter on token arrays: the tuner's choice becomes a draft; lookups not drafted teach."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from localspec.speculative.auto import AutoDrafter
from localspec.speculative.ngram import NGramIndex, NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits, Proposer
from localspec.speculative.sampling import Sampler
from localspec.speculative.sources import Interval, Span
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import NGRAM, NONE, HardwareProfile, Tuner, ngram_key
from tests.speculative.auto_steps import propose

# batches so expensive that plain decoding always wins: every n-gram lookup is a shadow
COSTLY = HardwareProfile(verify_s=tuple(1.0 * b for b in range(1, 10)))
CHEAP = HardwareProfile(verify_s=tuple(1.0 + 0.01 * b for b in range(9)), draft_s=0.1)


def drafter(profile: HardwareProfile, loader: object = None) -> AutoDrafter:
    ngram = NGramProposer(2, 12)
    return AutoDrafter(Tuner(profile, explore=0.0), ngram, loader)  # type: ignore[arg-type]


def test_undrafted_lookups_are_scored_against_what_the_target_produced() -> None:
    auto = drafter(COSTLY)
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]  # "5 6 7" occurred before, followed by 8 9 1
    auto.ngram.reset(history)
    draft, choice = propose(auto, history, 3, 0.0)
    assert choice.proposer == NONE and draft.tokens == []
    key = ngram_key(3)
    assert auto.tuner.acceptance.observations(key) == 0
    auto.settle_shadows([*history, 8])  # one token so far, and it matches: wait for more
    assert auto.tuner.acceptance.observations(key) == 0
    auto.settle_shadows([*history, 8, 9, 4])  # 8, 9 match, then 4 instead of 1
    counts = auto.tuner.acceptance.counts[key]
    assert [round(a, 6) for a, _ in counts[:3]] == [1.0, 1.0, 0.0]
    assert [round(t, 6) for _, t in counts[:3]] == [1.0, 1.0, 1.0]
    auto.settle_shadows([*history, 8, 9, 4, 4])
    assert auto.tuner.acceptance.observations(key) == 1.0  # settled once, not again


def test_drafted_lookups_are_not_also_shadowed() -> None:
    auto = drafter(CHEAP)
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    auto.ngram.reset(history)
    draft, choice = propose(auto, history, 3, 0.0)
    assert choice.proposer == NGRAM and draft.tokens == [8, 9, 1]
    auto.settle_shadows([*history, 8, 9, 1, 3])
    assert auto.tuner.acceptance.observations(ngram_key(3)) == 0  # only observe() counts it


def test_each_request_is_priced_with_its_own_exact_width_on_the_routes_tuner() -> None:
    """One tuner serves every request of a route. A sampled request (verified in one batch)
    whose prompt a greedy one pre-empts (verified a token at a time: no exact width) resumes
    priced as one batch, and the greedy one keeps its own width: neither leaves it behind."""
    tuner = Tuner(CHEAP, explore=0.0)
    sampled, greedy = (
        AutoDrafter(tuner, NGramProposer(2, 12)),
        AutoDrafter(tuner, NGramProposer(2, 12)),
    )
    sampled.verifies_with(None)
    greedy.verifies_with(TieGuard((0.0, 0.3, 0.3)))  # started after: the sampled one waits
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    for auto in (greedy, sampled):
        auto.start(history)
    draft, choice = propose(sampled, history, 3, 0.0)
    assert choice.proposer == NGRAM and draft.tokens == [8, 9, 1]
    assert propose(greedy, history, 3, 0.0)[1].proposer == NONE  # 1 token a decode never pays
    assert propose(sampled, history, 3, 0.0)[1].proposer == NGRAM


def test_the_draft_model_is_loaded_only_when_chosen() -> None:
    loads: list[int] = []

    class Fixed:
        name = "draft"

        def reset(self, prompt: object) -> None: ...

        def finish(self, tokens: object) -> None: ...

        def propose(self, tokens: object, limits: DraftLimits, sampler: Sampler) -> Draft:
            return Draft([1] * limits.max_len, "draft")

    def loader() -> Proposer:
        loads.append(1)
        return Fixed()

    auto = drafter(CHEAP, loader)
    history = [11, 12, 13, 14]  # no n-gram match: the draft model is the only drafter
    auto.ngram.reset(history)
    draft, choice = propose(auto, history, 4, 0.0)
    assert choice.proposer == "draft" and len(draft.tokens) == choice.k and loads == [1]
    propose(auto, history, 4, 0.0)
    assert loads == [1]
    costly = drafter(COSTLY, loader)
    costly.ngram.reset(history)
    propose(costly, history, 4, 0.0)
    assert loads == [1]  # a draft that can never pay on this profile is never loaded


# --- what exploring may cost, and what a step looks up ----------------------------------------

# a CPU where a perfectly accepted draft could just beat plain decoding (so it is explored at
# all) but a draft token costs 0.55x a target token and catching up 6 ms a token
BARELY = HardwareProfile(
    verify_s=(0.068, 0.108, 0.132, 0.132, 0.153, 0.176, 0.2, 0.216, 0.236),
    draft_s=0.037,
    catchup_s=0.006,
)


class _Drafts:
    """A draft model that proposes `k` copies of token 1 and counts its drafts."""

    name = "draft"

    def __init__(self) -> None:
        self.drafts = 0

    def reset(self, prompt: object) -> None: ...

    def finish(self, tokens: object) -> None: ...

    def behind(self, tokens: object) -> int:
        return 2

    def propose(self, tokens: object, limits: DraftLimits, sampler: Sampler) -> Draft:
        self.drafts += 1
        return Draft([1] * limits.max_len, "draft")


def test_the_draft_is_never_caught_up_on_a_prompt_just_to_explore() -> None:
    assert BARELY.draft_can_ever_pay(8)
    loads: list[int] = []

    def loader() -> Proposer:
        loads.append(1)
        return _Drafts()

    auto = AutoDrafter(
        Tuner(BARELY, explore=1.0, explore_ngram=False), NGramProposer(2, 12), loader
    )
    history = list(range(20, 320))  # a 300-token prompt with no repeats: nothing to look up
    auto.start(history)
    for _ in range(160):
        _draft, choice = propose(auto, history, 160, 0.0)
        assert choice.proposer == NONE
    assert loads == []  # 300 tokens of catching up cost more than 1% of the answer's time


def test_explorations_of_a_loaded_draft_stay_within_the_request_budget() -> None:
    tuner = Tuner(BARELY, explore=1.0, explore_ngram=False)
    drafts = _Drafts()
    auto = AutoDrafter(tuner, NGramProposer(2, 12), lambda: drafts, draft_ready=lambda: True)
    history = [20, 21]  # so short that loading the draft catches up on nothing
    auto.start(history)
    plain, draft = tuner.options_for([], True, draft_behind=2, remaining=161)
    loss = tuner.exploration_loss(draft, plain)  # nothing is observed here: it stays put
    budget = tuner.exploration_budget(161).left
    assert loss > 0
    choices = [propose(auto, history, 160, 0.0)[1] for _ in range(160)]
    explored = [c for c in choices if c.explored]
    assert all(c.proposer == "draft" for c in explored)
    assert len(explored) == int(budget // loss)  # explored while it fit, then no more
    assert drafts.drafts == len(explored)


class _CountingIndex(NGramIndex):
    def __init__(self) -> None:
        super().__init__(2, 12)
        self.lookups = 0

    def lookup(
        self, max_len: int, min_match: int = 1, within: Sequence[Interval] | None = None
    ) -> tuple[list[int], int]:
        self.lookups += 1
        return super().lookup(max_len, min_match, within)


@pytest.mark.parametrize(
    ("regions", "per_step"), [((), 1), ((Span("suffix", 10, 20), Span("extra", 20, 30)), 3)]
)
def test_a_step_looks_up_each_source_once_and_nothing_more(
    regions: tuple[Span, ...], per_step: int
) -> None:
    ngram = NGramProposer(2, 12)
    index = _CountingIndex()
    ngram._index = index
    auto = AutoDrafter(Tuner(COSTLY, explore=0.0), ngram)
    history = list(range(100, 140))
    auto.start(history, regions)
    for step in range(1, 6):
        _draft, choice = propose(auto, history, 8, 0.0)
        assert choice.proposer == NONE
        history.append(200 + step)
        auto.settle_shadows(history)
        assert index.lookups == per_step * step
    propose(auto, history, 0, 0.0)  # nothing may be drafted: nothing looked up
    assert index.lookups == per_step * 5
