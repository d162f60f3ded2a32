"""A request's drafting budget (`max_draft_tokens`, `max_draft_ms`): when it runs out,
drafting ends for the rest of the request, never the request (real tiny models)."""

from __future__ import annotations

import pytest

from localspec import Finished, GenerationRequest, Runtime, SpecMode, SpecSettings
from localspec.errors import InvalidSettingsError

# a prompt the n-gram lookup drafts from again and again
PROMPT = "hello hello hello hello hello hello hello hello"


def run(runtime: Runtime, spec: SpecSettings) -> Finished:
    prompt = runtime.prompts.tokenize(PROMPT)
    request = GenerationRequest(prompt=prompt, max_tokens=40, spec=spec, ignore_eos=True)
    done = list(runtime.generate(request))[-1]
    assert isinstance(done, Finished)
    return done


def eager(mode: SpecMode = SpecMode.NGRAM, **budget: float) -> SpecSettings:
    return SpecSettings(mode, ngram_draft_max=4, draft_max=4, ngram_min_match=2, **budget)  # type: ignore[arg-type]


def test_a_token_budget_caps_drafting_and_the_answer_still_finishes(exact: Runtime) -> None:
    unlimited = run(exact, eager())
    assert unlimited.stats.drafted > 5 and not unlimited.stats.draft_budget_spent
    capped = run(exact, eager(max_draft_tokens=5))
    assert 0 < capped.stats.drafted <= 5
    assert capped.stats.draft_budget_spent
    assert capped.stats.generated_tokens == 40 and capped.finish_reason == "length"


@pytest.mark.parametrize("mode", [SpecMode.NGRAM, SpecMode.DRAFT, SpecMode.HYBRID, SpecMode.AUTO])
def test_an_empty_budget_drafts_nothing_in_every_mode(exact: Runtime, mode: SpecMode) -> None:
    for budget in ({"max_draft_tokens": 0}, {"max_draft_ms": 0.0}):
        done = run(exact, eager(mode, **budget))
        assert done.stats.drafted == 0, budget
        assert done.stats.draft_budget_spent and done.stats.generated_tokens == 40


def test_a_time_budget_ends_drafting_once_spent(exact: Runtime) -> None:
    """The draft model's drafts take real time: a budget far below the whole answer's
    drafting ends it early (counted in drafted tokens, not in seconds)."""
    unlimited = run(exact, eager(SpecMode.DRAFT))
    spent_ms = unlimited.stats.draft_s * 1e3
    capped = run(exact, eager(SpecMode.DRAFT, max_draft_ms=spent_ms / 1e6))
    assert capped.stats.draft_budget_spent
    assert capped.stats.drafted < unlimited.stats.drafted


def test_budgets_below_zero_are_refused() -> None:
    with pytest.raises(InvalidSettingsError, match="max_draft_tokens"):
        SpecSettings(max_draft_tokens=-1)
    with pytest.raises(InvalidSettingsError, match="max_draft_ms"):
        SpecSettings(max_draft_ms=-0.5)
    with pytest.raises(InvalidSettingsError, match="max_draft_ms"):
        SpecSettings(max_draft_ms=float("nan"))
