"""The draft-model proposer on a real tiny model: what its early stop and the tuner read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec import SamplingSettings
from localspec.llama import LlamaContext, LlamaModel, ModelSettings
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.proposer import DraftLimits
from localspec.speculative.sampling import Sampler

PROMPT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def model(tiny_draft_noisy: Path) -> Iterator[LlamaModel]:
    with LlamaModel(tiny_draft_noisy, ModelSettings()) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def draft(model: LlamaModel) -> Iterator[DraftModelProposer]:
    with LlamaContext(model, 256, n_threads=1) as context:
        yield DraftModelProposer(context)


def sampler(temperature: float, seed: int) -> Sampler:
    settings = SamplingSettings(temperature=temperature)
    return Sampler(settings, np.random.default_rng(seed))


def test_sampled_confidence_is_the_drawn_tokens_probability(
    model: LlamaModel, draft: DraftModelProposer
) -> None:
    tokens = model.tokenize(PROMPT, add_special=True, parse_special=False)
    seen_below_max = 0
    for seed in range(20):
        made = draft.propose(tokens, DraftLimits(max_len=6), sampler(0.7, seed))
        assert made.q_draft is not None and len(made.q_draft) == len(made) == 6
        for token, q, confidence in zip(made.tokens, made.q_draft, made.confidence, strict=True):
            assert confidence == pytest.approx(float(q[token]))
            seen_below_max += float(q[token]) < float(q.max())
    assert seen_below_max > 0  # at temperature 0.7 some draws are not the mode: the test bites


def test_the_early_stop_judges_the_drawn_token(
    model: LlamaModel, draft: DraftModelProposer
) -> None:
    """p_min sees q[token]: the draft stops exactly before the first drawn token below the
    threshold, even where the distribution's mode was above it."""
    tokens = model.tokenize(PROMPT, add_special=True, parse_special=False)
    cut_below_a_confident_mode = 0
    for seed in range(20):
        free = draft.propose(tokens, DraftLimits(max_len=6), sampler(0.7, seed))
        assert free.q_draft is not None
        drawn = [float(q[t]) for q, t in zip(free.q_draft, free.tokens, strict=True)]
        stop = next((i for i, p in enumerate(drawn) if p < 0.3), len(free))
        cut = draft.propose(tokens, DraftLimits(max_len=6, p_min=0.3), sampler(0.7, seed))
        assert cut.tokens == free.tokens[:stop]
        if stop < len(free):
            cut_below_a_confident_mode += float(free.q_draft[stop].max()) >= 0.3
    assert cut_below_a_confident_mode > 0
