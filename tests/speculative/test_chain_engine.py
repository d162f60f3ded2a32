"""An explicit sampler chain through the engine, on the tiny models: speculation keeps the
chain's distribution (chi-square, as `test_engine`'s sampling test) and, greedy, its output."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from localspec import Runtime, SamplingSettings
from localspec.llama.context import LlamaContext
from localspec.speculative.infill_sampler import InfillVocab
from localspec.speculative.sampling import distribution
from tests.speculative.test_engine import (
    PROMPTS,
    diverged_at_a_near_tie,
    joint_pvalue,
    run,
    spec,
)

CHAINS = {
    # llama.vim's completion chain, its top_k 5 rather than 40 (which leaves only the end of
    # generation on this tiny model); after this prompt, where the text repeats so that
    # n-grams draft too, infill leaves two tokens, then one or two
    "infill": (
        SamplingSettings(samplers=("top_k", "top_p", "infill"), top_k=5, top_p=0.95),
        PROMPTS[1],
    ),
    # min_p after the temperature, llama.cpp's order reversed
    "reordered": (
        SamplingSettings(
            samplers=("top_k", "temperature", "min_p"), top_k=5, temperature=1.5, min_p=0.1
        ),
        "ab ab ab ab ab ab ab ab",
    ),
}


def _exact_joint(
    runtime: Runtime, tokens: list[int], settings: SamplingSettings
) -> dict[tuple[int, int], float]:
    """p(t1) p(t2 | t1) under the chain, from the target's own one-token decoding."""
    vocab = InfillVocab(runtime.models.target_model)
    with LlamaContext(runtime.models.target_model, 512, n_threads=1) as ctx:
        p1 = distribution(ctx.sync(tokens), tokens, settings, vocab)
        joint = {}
        for a in np.nonzero(p1)[0]:
            after = [*tokens, int(a)]
            p2 = distribution(ctx.sync(after), after, settings, vocab)
            for b in np.nonzero(p2)[0]:
                joint[int(a), int(b)] = float(p1[a] * p2[b])
    return joint


@pytest.mark.parametrize("mode", ["draft", "ngram"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_speculation_keeps_the_chains_distribution(noisy: Runtime, chain: str, mode: str) -> None:
    """Chi-square on the first two tokens over 800 seeded generations (fixed verdict): the
    draft model's min(1, p/q) with q under the same chain, and n-gram sample-and-compare."""
    settings, prompt = CHAINS[chain]
    tokens = noisy.prompts.tokenize(prompt)
    joint = _exact_joint(noisy, tokens, settings)
    assert len(joint) > 2  # the chain leaves a choice
    counts = dict.fromkeys(joint, 0)
    drafted = 0
    n = 800
    for seed in range(n):
        sampling = replace(settings, seed=seed)
        done = run(
            noisy, tokens, max_tokens=3, ignore_eos=True, sampling=sampling, spec=spec(mode, 3)
        )
        counts[done.tokens[0], done.tokens[1]] += 1
        drafted += done.stats.drafted
    assert drafted >= n  # the rule was exercised
    assert joint_pvalue(joint, counts) > 0.001


@pytest.mark.parametrize(("mode", "k"), [("ngram", 4), ("draft", 2), ("draft", 8), ("hybrid", 4)])
def test_greedy_with_a_chain_speculation_equals_plain_decoding(
    exact: Runtime, noisy: Runtime, mode: str, k: int
) -> None:
    """Temperature 0 after top_k and infill: verification compares with the chain's argmax."""
    greedy = SamplingSettings(samplers=("top_k", "infill", "temperature"), top_k=5)
    tolerated = accepted = changed = 0
    for runtime in (exact, noisy):
        for prompt in PROMPTS:
            tokens = runtime.prompts.tokenize(prompt)
            args = dict(max_tokens=40, ignore_eos=True, sampling=greedy)
            plain = run(runtime, tokens, spec=spec("off"), **args)
            fast = run(runtime, tokens, spec=spec(mode, k), **args)
            accepted += fast.stats.accepted
            changed += plain.tokens != run(runtime, tokens, max_tokens=40, ignore_eos=True).tokens
            tolerated += diverged_at_a_near_tie(runtime, tokens, plain, fast, f"{mode} k={k}")
    assert tolerated <= 1
    assert accepted > 0  # speculation took part
    assert changed > 0  # and the chain is not plain greedy decoding
