"""Observations with hand-set figures, for the watchers' tests."""

from __future__ import annotations

from typing import Any

from localspec.observe.observation import Observation
from localspec.speculative.stats import GenerationStats, ProposerStats

_DEFAULTS: dict[str, Any] = {
    "route": "chat",
    "pair": "t+d",
    "mode": "auto",
    "constraint": "none",
    "generated_tokens": 11,
    "drafted": 0,
    "accepted": 0,
    "target_steps": 10,
    "ttft_s": 0.1,
    "prefill_s": 0.1,
    "generation_s": 1.0,
    "draft_s": 0.0,
}


def made(**fields: Any) -> Observation:
    """An observation of 11 tokens in 10 target steps, with `fields` set."""
    return Observation(**{**_DEFAULTS, **fields})


def ngram_stats(drafted: int, accepted: int) -> GenerationStats:
    """A finished generation's statistics: 12 tokens in 10 steps, n-gram drafts."""
    return GenerationStats(
        mode="ngram",
        generated_tokens=12,
        target_steps=10,
        drafted=drafted,
        accepted=accepted,
        by_proposer={"ngram": ProposerStats(10, drafted, accepted)},
    )
