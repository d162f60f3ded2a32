"""Suffix drafts change nothing the user gets: greedy output is plain decoding's in every mode
that drafts from them, and sampling keeps the target's distribution (tiny models)."""

from collections import Counter
from dataclasses import replace

import pytest

from localspec import Runtime, SamplingSettings
from localspec.speculative.suffix import SuffixStore
from tests.speculative.test_engine import (
    PROMPTS,
    _exact_joint,
    diverged_at_a_near_tie,
    joint_pvalue,
    run,
    spec,
)


def _store(runtime: Runtime) -> SuffixStore:
    store = runtime.ngram.store
    assert store is not None
    return store


@pytest.mark.parametrize("mode", ["ngram", "hybrid", "auto"])
def test_greedy_output_with_suffix_drafts_is_plain_decodings(noisy: Runtime, mode: str) -> None:
    """Each prompt is answered plainly first, which teaches the store; the mode then drafts
    from the store (and, in auto, from the request's own sequence walked by frequency). A
    long minimum match keeps the plain lookup quiet, so the suffix sources do the drafting.
    The tiny model has no exact width, where `auto` prices greedy drafts one token at a time
    and drafts none: here it verifies in one batch, and a divergence must be a near-tie."""
    store = _store(noisy)
    store.clear()
    drafted: Counter[str] = Counter()
    tolerated = 0
    settings = replace(spec(mode, 8), ngram_min_match=8, redecode_ties=mode != "auto")
    for prompt in PROMPTS:
        tokens = noisy.prompts.tokenize(prompt)
        plain = run(noisy, tokens, max_tokens=48, ignore_eos=True, spec=spec("off"))
        fast = run(noisy, tokens, max_tokens=48, ignore_eos=True, spec=settings)
        tolerated += diverged_at_a_near_tie(noisy, tokens, plain, fast, f"{mode} + suffix")
        for source, counts in fast.stats.by_proposer.items():
            drafted[source] += counts.drafted
    assert tolerated <= 1
    assert drafted["ngram-store"] > 0, drafted
    if mode == "auto":
        assert drafted["ngram-tree"] + drafted["ngram-store"] > drafted["ngram"], drafted


def test_no_suffix_drafts_when_the_request_turns_them_off(noisy: Runtime) -> None:
    store = _store(noisy)
    store.clear()
    tokens = noisy.prompts.tokenize(PROMPTS[0])
    plain = run(noisy, tokens, max_tokens=48, ignore_eos=True, spec=spec("off"))
    for mode in ("ngram", "auto"):
        settings = replace(spec(mode, 8), ngram_min_match=8, suffix_drafts=False)
        fast = run(noisy, tokens, max_tokens=48, ignore_eos=True, spec=settings)
        assert fast.tokens == plain.tokens
        assert not {"ngram-store", "ngram-tree"} & set(fast.stats.by_proposer)


def test_sampling_with_store_drafts_reproduces_the_target_distribution(noisy: Runtime) -> None:
    """Chi-square on the first two tokens over 1500 seeded generations whose first step
    drafts from the store (the prompt itself has no match long enough)."""
    store = _store(noisy)
    store.clear()
    tokens = noisy.prompts.tokenize("The quick brown fox jumps over")
    greedy = run(noisy, tokens, max_tokens=4, ignore_eos=True, spec=spec("off"))
    store.clear()
    store.add([*tokens, *greedy.tokens])
    joint = _exact_joint(noisy, tokens)
    counts = dict.fromkeys(joint, 0)
    settings = replace(spec("ngram", 3), ngram_min_match=4)
    drafted = 0
    n = 1500
    with store.holding():  # every run drafts from the same store
        for seed in range(n):
            sampling = SamplingSettings(temperature=1.0, top_k=3, seed=seed)
            done = run(
                noisy, tokens, max_tokens=3, ignore_eos=True, sampling=sampling, spec=settings
            )
            counts[done.tokens[0], done.tokens[1]] += 1
            drafted += done.stats.by_proposer["ngram-store"].drafted
    assert drafted >= 2 * n  # the first step drafted from the store on every run
    assert joint_pvalue(joint, counts) > 0.001


def test_plain_answers_teach_the_store_unless_the_request_does_not_learn(noisy: Runtime) -> None:
    store = _store(noisy)
    store.clear()
    tokens = noisy.prompts.tokenize(PROMPTS[1])
    run(noisy, tokens, max_tokens=8, ignore_eos=True, spec=replace(spec("off"), learn=False))
    assert len(store) == 0
    done = run(noisy, tokens, max_tokens=8, ignore_eos=True, spec=spec("off"))
    assert store.texts == [[*tokens, *done.tokens]]
