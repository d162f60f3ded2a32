"""The fixed modes' policy on a real tiny draft model: what an empty step carries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec import SamplingSettings
from localspec.llama import LlamaContext, LlamaModel, ModelSettings
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.policy import TARGET, DraftState, FixedDrafts
from localspec.speculative.sampling import Sampler
from localspec.speculative.settings import SpecMode, SpecSettings


@pytest.fixture(scope="module")
def draft(tiny_draft_noisy: Path) -> Iterator[DraftModelProposer]:
    with (
        LlamaModel(tiny_draft_noisy, ModelSettings()) as model,
        LlamaContext(model, 256, n_threads=1) as context,
    ):
        yield DraftModelProposer(context)


def state(history: list[int], p_min: float) -> DraftState:
    spec = SpecSettings(SpecMode.HYBRID, draft_max=4, ngram_draft_max=4, p_min=p_min)
    sampler = Sampler(SamplingSettings(temperature=0.0), np.random.default_rng(0))
    return DraftState(history, max_len=4, spec=spec, sampler=sampler)


def test_an_empty_model_draft_keeps_the_time_the_model_spent(draft: DraftModelProposer) -> None:
    """Hybrid with nothing to look up and a draft model too unsure to draft (p_min near 1,
    above what it gives its first token): the step is plain, and its draft still carries the
    model's time under the model's name, as auto's does; a fixed mode once returned a new
    empty draft, and the model's time went missing from `draft_s` and from the step
    profile's model row."""
    history = list(range(1, 40))  # no n-gram repeats: the lookup finds nothing
    policy = FixedDrafts([(NGramProposer(), False), (draft, True)])
    policy.start(history, [])
    empty = policy.propose(state(history, p_min=0.9999)).draft
    assert empty.tokens == []
    assert empty.source == draft.name
    assert empty.seconds > 0.0
    drafted = policy.propose(state(history, p_min=0.0)).draft  # the same model, willing
    assert drafted.source == draft.name and len(drafted.tokens) == 4


def test_an_empty_lookup_alone_is_a_plain_step() -> None:
    """ngram alone with nothing to look up: the target's step, as before."""
    history = list(range(1, 40))
    policy = FixedDrafts([(NGramProposer(), False)])
    policy.start(history, [])
    empty = policy.propose(state(history, p_min=0.0)).draft
    assert (empty.tokens, empty.source) == ([], TARGET)
