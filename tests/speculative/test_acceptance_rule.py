"""Exactness of the acceptance rule, on a synthetic target with known distributions.

The synthetic "models" map a token prefix to a next-token distribution over a 5-token
vocabulary (random but fixed by a hash of the prefix). Driving `verify_draft` the way the
engine does and counting the first two emitted tokens must reproduce the target's exact joint
distribution p(t1) p(t2 | t1): a chi-square test with fixed seeds (deterministic verdict).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import chisquare

from localspec.speculative.acceptance_rule import verify_draft
from localspec.speculative.proposer import Draft
from localspec.speculative.sampling import draw

VOCAB = 5
Model = Callable[[tuple[int, ...]], np.ndarray]


def _model(seed: int, sharpness: float) -> Model:
    def probs(prefix: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng([seed, *prefix, len(prefix)])
        z = rng.normal(size=VOCAB) * sharpness
        e = np.exp(z - z.max())
        p: np.ndarray = e / e.sum()
        return p

    return probs


TARGET = _model(seed=11, sharpness=1.5)
DRAFT = _model(seed=12, sharpness=1.5)  # a different model: acceptance is partial


def _target_rows(prefix: tuple[int, ...], draft: list[int]) -> Callable[[int], np.ndarray]:
    """The target's distribution at each draft position, as the engine's `target_at`."""

    def target_at(i: int) -> np.ndarray:
        return TARGET((*prefix, *draft[:i]))

    return target_at


def _exact_joint() -> np.ndarray:
    joint = np.zeros((VOCAB, VOCAB))
    p1 = TARGET(())
    for a in range(VOCAB):
        joint[a] = p1[a] * TARGET((a,))
    return joint.ravel()


def _speculate(
    draft_for: Callable[[tuple[int, ...], np.random.Generator], Draft], n: int
) -> np.ndarray:
    """Counts of the first two emitted tokens over `n` runs of the engine's step loop."""
    counts = np.zeros(VOCAB * VOCAB)
    rng = np.random.default_rng(2024)
    draft_rng = np.random.default_rng(7)
    for _ in range(n):
        out: list[int] = []
        while len(out) < 2:
            prefix = tuple(out)
            draft = draft_for(prefix, draft_rng)
            verdict = verify_draft(draft, _target_rows(prefix, draft.tokens), rng)
            out.extend(verdict.tokens)
        counts[out[0] * VOCAB + out[1]] += 1
    return counts


def _assert_matches_target(counts: np.ndarray) -> None:
    expected = _exact_joint() * counts.sum()
    keep = expected >= 5  # chi-square needs expected counts of at least 5 per cell
    observed, wanted = counts[keep], expected[keep]
    if not keep.all():  # pool the rare cells into one
        observed = np.append(observed, counts[~keep].sum())
        wanted = np.append(wanted, expected[~keep].sum())
    result = chisquare(observed, wanted)
    assert result.pvalue > 0.001, (observed, wanted, result)


def test_draft_model_rule_reproduces_target_distribution() -> None:
    def draft_for(prefix: tuple[int, ...], rng: np.random.Generator) -> Draft:
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        for _ in range(3):
            q = DRAFT((*prefix, *tokens))
            tokens.append(draw(q, rng))
            qs.append(q)
        return Draft(tokens, "draft", qs)

    _assert_matches_target(_speculate(draft_for, 10_000))


def test_sample_and_compare_reproduces_target_distribution() -> None:
    # an n-gram-like deterministic proposal that is sometimes right
    def draft_for(prefix: tuple[int, ...], _rng: np.random.Generator) -> Draft:
        return Draft([int(np.argmax(TARGET(prefix))), 0, 1], "ngram")

    _assert_matches_target(_speculate(draft_for, 10_000))


def test_a_wrong_rule_is_detected() -> None:
    """Guard against a vacuous test: accepting draft tokens blindly must fail the check."""

    def draft_for(prefix: tuple[int, ...], rng: np.random.Generator) -> Draft:
        return Draft([draw(DRAFT(prefix), rng)], "draft")

    counts = np.zeros(VOCAB * VOCAB)
    rng = np.random.default_rng(3)
    for _ in range(10_000):
        first = draft_for((), rng).tokens[0]  # accepted without verification
        second = draw(TARGET((first,)), rng)
        counts[first * VOCAB + second] += 1
    expected = _exact_joint() * counts.sum()
    assert chisquare(counts, expected).pvalue < 1e-6


def test_greedy_accepts_prefix_of_argmaxes_then_corrects() -> None:
    argmax = [3, 1, 4, 1]
    verdict = verify_draft(
        Draft([3, 1, 2, 9], "ngram"), lambda i: argmax[i], np.random.default_rng()
    )
    assert verdict.accepted == 2 and verdict.tokens == [3, 1, 4] and not verdict.bonus
    verdict = verify_draft(Draft([3, 1, 4], "ngram"), lambda i: argmax[i], np.random.default_rng())
    assert verdict.accepted == 3 and verdict.tokens == [3, 1, 4, 1] and verdict.bonus
    verdict = verify_draft(Draft([], "target"), lambda i: argmax[i], np.random.default_rng())
    assert verdict.accepted == 0 and verdict.tokens == [3]


def test_sample_and_compare_consumes_randomness_like_plain_sampling() -> None:
    """Seeded n-gram speculation emits exactly what seeded plain sampling emits."""
    for seed in range(20):
        plain_rng = np.random.default_rng(seed)
        plain: list[int] = []
        while len(plain) < 6:
            plain.append(draw(TARGET(tuple(plain)), plain_rng))
        spec_rng = np.random.default_rng(seed)
        spec: list[int] = []
        while len(spec) < 6:
            guess = [int(np.argmax(TARGET(tuple(spec))))] * 3
            prefix = tuple(spec)
            verdict = verify_draft(Draft(guess, "ngram"), _target_rows(prefix, guess), spec_rng)
            spec.extend(verdict.tokens)
        assert spec[:6] == plain
