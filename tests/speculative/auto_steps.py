"""Driving `auto`'s policy one step at a time, as the engine's step does, for its unit tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.speculative.auto import AutoDrafter
from localspec.speculative.policy import DraftState
from localspec.speculative.proposer import Draft
from localspec.speculative.sampling import Sampler, SamplingSettings
from localspec.speculative.settings import SpecSettings
from localspec.speculative.tuner import Choice


def sampler() -> Sampler:
    return Sampler(SamplingSettings(), np.random.default_rng(0))


def propose(
    auto: AutoDrafter,
    history: Sequence[int],
    max_len: int,
    p_min: float | None,
    *,
    suffix: bool = False,
) -> tuple[Draft, Choice]:
    """The policy's draft and choice for one step, under `p_min`; suffix drafts only where
    the test asks for them (the tests of the other sources count the lookups they make)."""
    spec = SpecSettings(p_min=p_min, suffix_drafts=suffix)
    state = DraftState(history, max_len, spec, sampler())
    proposal = auto.propose(state)
    assert proposal.choice is not None
    return proposal.draft, proposal.choice
