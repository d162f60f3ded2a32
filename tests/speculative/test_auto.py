"""AutoDrafter on token arrays: the tuner's choice becomes a draft; lookups not drafted teach."""

from __future__ import annotations

import numpy as np

from localspec.speculative.auto import AutoDrafter
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits, Proposer
from localspec.speculative.sampling import Sampler, SamplingSettings
from localspec.speculative.tuner import NGRAM, NONE, HardwareProfile, Tuner, ngram_key

# batches so expensive that plain decoding always wins: every n-gram lookup is a shadow
COSTLY = HardwareProfile(verify_s=tuple(1.0 * b for b in range(1, 10)))
CHEAP = HardwareProfile(verify_s=tuple(1.0 + 0.01 * b for b in range(9)), draft_s=0.1)


def sampler() -> Sampler:
    return Sampler(SamplingSettings(), np.random.default_rng(0))


def drafter(profile: HardwareProfile, loader: object = None) -> AutoDrafter:
    ngram = NGramProposer(2, 12)
    return AutoDrafter(Tuner(profile, explore=0.0), ngram, loader)  # type: ignore[arg-type]


def test_undrafted_lookups_are_scored_against_what_the_target_produced() -> None:
    auto = drafter(COSTLY)
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]  # "5 6 7" occurred before, followed by 8 9 1
    auto.ngram.reset(history)
    draft, choice = auto.propose(history, 3, 0.0, sampler())
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
    draft, choice = auto.propose(history, 3, 0.0, sampler())
    assert choice.proposer == NGRAM and draft.tokens == [8, 9, 1]
    auto.settle_shadows([*history, 8, 9, 1, 3])
    assert auto.tuner.acceptance.observations(ngram_key(3)) == 0  # only observe() counts it


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
    draft, choice = auto.propose(history, 4, 0.0, sampler())
    assert choice.proposer == "draft" and len(draft.tokens) == choice.k and loads == [1]
    auto.propose(history, 4, 0.0, sampler())
    assert loads == [1]
    costly = drafter(COSTLY, loader)
    costly.ngram.reset(history)
    costly.propose(history, 4, 0.0, sampler())
    assert loads == [1]  # a draft that can never pay on this profile is never loaded
