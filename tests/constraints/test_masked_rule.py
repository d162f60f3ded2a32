"""The acceptance rule under a mask, on plain arrays: what stays exact and what does not.

Synthetic target and draft over 6 tokens, with a mask per prefix (as a constraint gives one)
that forbids the draft's favourite tokens. Driving `verify_draft` as the engine does: the
draft sampling from its masked q and the rule seeing that q and the masked p reproduces the
masked target's joint distribution of the first two tokens (chi-square, fixed seeds); the
two careless variants the issue names (an unmasked q, a rule on unmasked p) do not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import chisquare

from localspec.speculative.acceptance_rule import verify_draft
from localspec.speculative.proposer import Draft
from localspec.speculative.sampling import draw

VOCAB = 6
Probs = np.ndarray


def _probs(seed: int, prefix: tuple[int, ...], favoured: bool = False) -> Probs:
    rng = np.random.default_rng([seed, *prefix, len(prefix)])
    z = rng.normal(size=VOCAB) * 1.5
    if favoured:
        z[[0, 1]] += 5.0  # the draft's favourites: forbidden by the mask below
    e = np.exp(z - z.max())
    p: Probs = e / e.sum()
    return p


def allowed(prefix: tuple[int, ...]) -> np.ndarray:
    """Tokens 0 and 1 are always forbidden; token 2 is forbidden after an odd token."""
    keep = np.ones(VOCAB, dtype=bool)
    keep[[0, 1]] = False
    if prefix and prefix[-1] % 2:
        keep[2] = False
    return keep


def masked(p: Probs, prefix: tuple[int, ...]) -> Probs:
    q = np.where(allowed(prefix), p, 0.0)
    out: Probs = q / q.sum()
    return out


def target(prefix: tuple[int, ...]) -> Probs:
    return masked(_probs(21, prefix), prefix)


def unmasked_draft(prefix: tuple[int, ...]) -> Probs:
    return _probs(22, prefix, favoured=True)


def masked_draft(prefix: tuple[int, ...]) -> Probs:
    return masked(unmasked_draft(prefix), prefix)


Rule = Callable[[tuple[int, ...], np.random.Generator], Draft]


def _rows(
    target_for: Callable[[tuple[int, ...]], Probs], prefix: tuple[int, ...], draft: list[int]
) -> Callable[[int], Probs]:
    """The target's distribution at each draft position, as the engine's `target_at`."""
    return lambda i: target_for((*prefix, *draft[:i]))


def _speculate(draft_for: Rule, target_for: Callable[[tuple[int, ...]], Probs]) -> np.ndarray:
    counts = np.zeros(VOCAB * VOCAB)
    rng, draft_rng = np.random.default_rng(2024), np.random.default_rng(7)
    for _ in range(10_000):
        out: list[int] = []
        while len(out) < 2:
            prefix = tuple(out)
            draft = draft_for(prefix, draft_rng)
            verdict = verify_draft(draft, _rows(target_for, prefix, draft.tokens), rng)
            out.extend(verdict.tokens)
        counts[out[0] * VOCAB + out[1]] += 1
    return counts


def _pvalue(counts: np.ndarray) -> float:
    p1 = target(())
    expected = np.concatenate([p1[a] * target((a,)) for a in range(VOCAB)]) * counts.sum()
    if (counts[expected == 0] > 0).any():
        return 0.0  # a forbidden token came out
    keep = expected >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum())
    return float(chisquare(observed[wanted > 0], wanted[wanted > 0]).pvalue)


def _drafts(q_for: Callable[[tuple[int, ...]], Probs], reported: Callable[..., Probs]) -> Rule:
    """Drafts of 3 sampled from `q_for`, reporting `reported` as their q."""

    def draft_for(prefix: tuple[int, ...], rng: np.random.Generator) -> Draft:
        tokens: list[int] = []
        qs: list[Probs] = []
        for _ in range(3):
            here = (*prefix, *tokens)
            tokens.append(draw(q_for(here), rng))
            qs.append(reported(here))
        return Draft(tokens, "draft", qs)

    return draft_for


def test_the_unmasked_draft_would_mostly_propose_forbidden_tokens() -> None:
    for prefix in [(), (3,), (2, 5)]:
        assert unmasked_draft(prefix)[~allowed(prefix)].sum() > 0.8


def test_masked_q_and_masked_p_reproduce_the_masked_target() -> None:
    counts = _speculate(_drafts(masked_draft, masked_draft), target)
    assert _pvalue(counts) > 0.001


def test_sample_and_compare_under_the_mask_reproduces_the_masked_target() -> None:
    def draft_for(prefix: tuple[int, ...], _rng: np.random.Generator) -> Draft:
        return Draft([int(np.argmax(masked_draft(prefix))), 3, 4], "ngram")

    assert _pvalue(_speculate(draft_for, target)) > 0.001


def test_a_q_computed_without_the_mask_is_detected() -> None:
    counts = _speculate(_drafts(masked_draft, unmasked_draft), target)
    assert _pvalue(counts) < 1e-6


def test_a_rule_on_unmasked_probabilities_is_detected() -> None:
    def unmasked_target(prefix: tuple[int, ...]) -> Probs:
        return _probs(21, prefix)

    counts = _speculate(_drafts(masked_draft, masked_draft), unmasked_target)
    assert _pvalue(counts) < 1e-6
