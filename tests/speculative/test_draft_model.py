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


def test_the_sampled_stop_is_decided_before_the_draw(
    model: LlamaModel, draft: DraftModelProposer
) -> None:
    """With sampling, the early stop (p_min and the tuner's keep_drafting) reads q.max(), known
    before the token is drawn: a stop that judged the drawn token would keep only confident
    draws while min(1, p/q) assumes all of q, and the output would be biased (the engine's
    chi-square test with p_min catches that). The bands learn from the same number."""
    tokens = model.tokenize(PROMPT, add_special=True, parse_special=False)
    seen_below_max = 0
    for seed in range(20):
        made = draft.propose(tokens, DraftLimits(max_len=6), sampler(0.7, seed))
        assert made.q_draft is not None and len(made.q_draft) == len(made) == 6
        for token, q, confidence in zip(made.tokens, made.q_draft, made.confidence, strict=True):
            assert confidence == pytest.approx(float(q.max()))
            seen_below_max += float(q[token]) < float(q.max())
    assert seen_below_max > 0  # some draws were not the mode: the two numbers differ here
    # the first position's q is the same for every seed: so is the stop there
    first = {
        len(draft.propose(tokens, DraftLimits(max_len=6, p_min=0.5), sampler(0.7, s))) > 0
        for s in range(20)
    }
    assert len(first) == 1
