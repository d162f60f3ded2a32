"""A pair whose vocabularies differ by padding (Qwen2.5-Coder 7B+ lists 152064 tokens, its
0.5B draft 151936): the draft drafts only ids both have, output stays the target's own, and
a sequence holding an id the draft lacks is drafted nothing without failing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from localspec import Runtime, RuntimeSettings, SamplingSettings
from localspec.speculative.draft_model import PairVocab
from tests.speculative.test_engine import (
    diverged_at_a_near_tie,
    exact_joint,
    joint_pvalue,
    run,
    spec,
)
from tests.tiny_models import N_VOCAB, PARTIAL_DRAFT_NOISE, TinySpec, write_tiny_model

PADDING = 8
PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick brown",
]


def _runtime(target: Path, draft: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=target, draft=draft, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        runtime.load_draft()
        yield runtime


@pytest.fixture(scope="module")
def padded_target(tiny_models_dir: Path, tiny_draft_noisy: Path) -> Iterator[Runtime]:
    """The target lists PADDING more ids than its draft (the Qwen2.5 7B + 0.5B case)."""
    target = write_tiny_model(tiny_models_dir / "target-padded.gguf", TinySpec(padding=PADDING))
    yield from _runtime(target, tiny_draft_noisy)


@pytest.fixture(scope="module")
def padded_draft(tiny_models_dir: Path, tiny_target: Path) -> Iterator[Runtime]:
    """The draft lists PADDING more ids than its target, and may rank one of them first."""
    spec_ = TinySpec(noise=PARTIAL_DRAFT_NOISE, padding=PADDING)
    draft = write_tiny_model(tiny_models_dir / "draft-noisy-padded.gguf", spec_)
    yield from _runtime(tiny_target, draft)


def test_the_draft_logits_are_fitted_to_the_targets_ids() -> None:
    row = np.arange(4, dtype=np.float32)
    wider = PairVocab(draft=4, target=6).fit(row)
    assert wider.tolist() == [0, 1, 2, 3, -np.inf, -np.inf]  # padding the draft lacks: never
    assert PairVocab(draft=4, target=3).fit(row).tolist() == [0, 1, 2]  # the draft's own: gone
    assert PairVocab(draft=4, target=6).readable([0, 3]) is True
    assert PairVocab(draft=4, target=6).readable([0, 4]) is False
    assert PairVocab(draft=6, target=4).readable([5]) is True  # the target never sends one


@pytest.mark.parametrize("pair", ["padded_target", "padded_draft"])
@pytest.mark.parametrize(("mode", "k"), [("draft", 4), ("hybrid", 4), ("draft", 8)])
def test_greedy_speculation_equals_plain_decoding(
    request: pytest.FixtureRequest, pair: str, mode: str, k: int
) -> None:
    runtime: Runtime = request.getfixturevalue(pair)
    assert runtime.models.draft_model is not None
    assert runtime.models.draft_model.n_vocab != runtime.models.target_model.n_vocab
    tolerated = drafted = accepted = 0
    for prompt in PROMPTS:
        tokens = runtime.prompts.tokenize(prompt)
        plain = run(runtime, tokens, max_tokens=48, ignore_eos=True, spec=spec("off"))
        fast = run(runtime, tokens, max_tokens=48, ignore_eos=True, spec=spec(mode, k))
        tolerated += diverged_at_a_near_tie(runtime, tokens, plain, fast, f"{pair} {mode}")
        drafted += fast.stats.drafted
        accepted += fast.stats.accepted
    assert tolerated <= 1
    assert drafted > 0 and accepted > 0  # the draft model really drafted, and was right


def test_sampling_keeps_the_targets_distribution(padded_target: Runtime) -> None:
    """The draft's q has no mass on the target's padding, p may: min(1, p/q) with the
    residual still gives the target's joint distribution of the first two tokens."""
    tokens = padded_target.prompts.tokenize("ab ab ab ab ab ab ab ab")
    joint = exact_joint(padded_target.models.target_model, tokens)
    counts = dict.fromkeys(joint, 0)
    drafted = 0
    n = 1500
    for seed in range(n):
        settings = SamplingSettings(temperature=1.0, top_k=3, seed=seed)
        done = run(
            padded_target,
            tokens,
            max_tokens=3,
            ignore_eos=True,
            sampling=settings,
            spec=spec("draft", 3),
        )
        counts[done.tokens[0], done.tokens[1]] += 1
        drafted += done.stats.drafted
    assert drafted >= 2 * n
    assert joint_pvalue(joint, counts) > 0.001


def test_a_prompt_holding_an_id_the_draft_lacks_is_answered_without_drafts(
    padded_target: Runtime,
) -> None:
    """A client may send token ids: one the target has and the draft lacks cannot be
    decoded by the draft, so that request is drafted nothing, and the next one is."""
    tokens = padded_target.prompts.tokenize(PROMPTS[0])
    holding = [*tokens[:5], N_VOCAB + 2, *tokens[5:]]
    plain = run(padded_target, holding, max_tokens=24, ignore_eos=True, spec=spec("off"))
    for mode in ("draft", "hybrid", "auto"):
        chosen = replace(spec(mode, 4), learn=False)
        done = run(padded_target, holding, max_tokens=24, ignore_eos=True, spec=chosen)
        assert done.tokens == plain.tokens
        proposer = done.stats.by_proposer.get("draft")
        assert proposer is None or proposer.drafted == 0
    after = run(padded_target, tokens, max_tokens=24, ignore_eos=True, spec=spec("draft", 4))
    assert after.stats.drafted > 0
