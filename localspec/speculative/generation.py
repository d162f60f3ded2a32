"""One request's state from step to step, and what one step did (`Engine.step`'s terms).

Apart from the engine so that its loop reads as the steps it takes; a server's worker holds
several generations at once (`localspec.server.slots`), each its own `Generation`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np

from localspec.constraints.guide import Guide
from localspec.speculative.acceptance_rule import Verdict
from localspec.speculative.events import FinishReason, TextChunk
from localspec.speculative.infill_sampler import InfillVocab
from localspec.speculative.policy import DraftPolicy, Proposal
from localspec.speculative.protocols import Logits
from localspec.speculative.request import GenerationRequest
from localspec.speculative.sampling import Sampler, SamplingSettings
from localspec.speculative.steptime import StepProfile
from localspec.speculative.tally import StatsTally
from localspec.speculative.textstream import TokenTextStream
from localspec.speculative.ties import TieGuard


def budget_left(gen: Generation) -> int:
    """How many tokens the request's drafting budget still allows (`SpecSettings`:
    `max_draft_tokens`, `max_draft_ms`); when it runs out the rest of the answer is decoded
    plainly, and the statistics say so."""
    spec, tally = gen.request.spec, gen.tally
    left = gen.request.max_tokens
    if spec.max_draft_tokens is not None:
        left = max(spec.max_draft_tokens - tally.drafted, 0)
    if spec.max_draft_ms is not None and tally.draft_s * 1e3 >= spec.max_draft_ms:
        left = 0
    tally.draft_budget_spent = tally.draft_budget_spent or left == 0
    return left


def samplers(settings: SamplingSettings, infill: InfillVocab) -> tuple[Sampler, Sampler]:
    """Independent random streams for target and draft, both derived from the seed (target
    and draft share the vocabulary an `infill` stage reads)."""
    seed = settings.seed if settings.seed is not None else secrets.randbits(63)
    target_seq, draft_seq = np.random.SeedSequence(seed).spawn(2)
    return (
        Sampler(settings, np.random.default_rng(target_seq), infill),
        Sampler(settings, np.random.default_rng(draft_seq), infill),
    )


@dataclass
class Generation:
    """One request's state from step to step: what `Engine.step` reads and advances."""

    request: GenerationRequest
    policy: DraftPolicy
    guide: Guide | None
    target_sampler: Sampler
    draft_sampler: Sampler
    tally: StatsTally
    stream: TokenTextStream
    history: list[int]
    # the pending token's logits when the prefill computed them (until the first step)
    head: Logits | None
    started: float  # when the request began, on the engine's clock
    generating: float  # when its first step began
    ties: TieGuard | None = None  # the kernel noise greedy verification guards against
    profile: StepProfile = field(default_factory=StepProfile)


@dataclass(frozen=True)
class Begun:
    """A checked request before its prompt is processed: its guide, tally and start."""

    guide: Guide | None
    tally: StatsTally
    started: float


@dataclass(frozen=True)
class StepResult:
    """What one target step did: the proposal, its verdict, the tokens it appended (and
    their text), why the generation ends (None: it goes on), and the chunk to stream."""

    proposal: Proposal
    verdict: Verdict
    emitted: list[int]
    finish: FinishReason | None
    chunk: TextChunk | None
