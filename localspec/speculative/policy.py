"""Drafting policies: what the engine's step asks for a draft, and tells what became of it.

Every way of drafting is one `DraftPolicy`: the fixed modes (`FixedDrafts`: off, ngram,
draft, hybrid), `auto` (`localspec.speculative.auto.AutoDrafter`, the tuner's policy) and a
recorded run (`RecordedPolicy`, which proposes exactly the steps a run took). The engine's
one step (`Engine.step`) calls `propose` before it verifies and `observe` after, so the live
engine and the what-if replay (`localspec.speculative.simulate`) run the same code for every
policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from localspec.errors import UsageError
from localspec.speculative.acceptance_rule import Verdict
from localspec.speculative.proposer import Draft, DraftConstraint, DraftLimits, Proposer
from localspec.speculative.sampling import Sampler
from localspec.speculative.settings import SpecSettings
from localspec.speculative.sources import Span
from localspec.speculative.tuner import Choice

TARGET = "target"  # the source of a step that drafted nothing: the target's own token


@dataclass(frozen=True)
class DraftState:
    """What a policy sees before a step: the sequence so far, how long a draft may be (the
    answer's end, the context and the request's drafting budget allow `max_len`), and how
    many tokens the answer may still take (`remaining`, what a draft's payback is priced
    over; None: max_len + 1)."""

    history: Sequence[int]
    max_len: int  # the step emits at most max_len + 1 tokens and must fit the context
    spec: SpecSettings
    sampler: Sampler  # the draft's random stream (the target has its own)
    constraint: DraftConstraint | None = None
    remaining: int | None = None

    @property
    def horizon(self) -> int:
        return self.max_len + 1 if self.remaining is None else self.remaining


@dataclass(frozen=True)
class Proposal:
    """A step's draft and, for a policy that chooses (auto), the choice behind it."""

    draft: Draft
    choice: Choice | None = None


@dataclass(frozen=True)
class StepOutcome:
    """What became of a proposal: the verdict, the verification's decodes and their time
    (0.0 where the step's time teaches nothing: the first step decodes no pending token),
    and the sequence after the step's tokens were appended."""

    proposal: Proposal
    verdict: Verdict
    verify_s: float
    decoded: tuple[int, ...]
    history: Sequence[int]


class DraftPolicy(Protocol):
    """Decides each step's draft; learns from each step's outcome if it learns at all."""

    def start(self, prompt: Sequence[int], regions: Sequence[Span]) -> None:
        """A generation starts from `prompt` (its named parts: `regions`)."""
        ...

    def propose(self, state: DraftState) -> Proposal: ...

    def observe(self, outcome: StepOutcome) -> None: ...

    def finish(self, history: Sequence[int]) -> None:
        """The generation ended with `history` (prompt + output)."""
        ...


def no_draft() -> Draft:
    return Draft([], TARGET)


class FixedDrafts:
    """A fixed mode: each step drafts from the first of its proposers that offers anything
    (hybrid: the n-gram lookup, then the draft model), within the request's limits."""

    def __init__(
        self, proposers: Sequence[tuple[Proposer, bool]], learners: Sequence[Proposer] = ()
    ) -> None:
        """`proposers`: (proposer, is_model) in the order they are tried; none is plain.
        `learners` are told of the finished generation without drafting: the n-gram
        lookup's session cache and suffix store learn from plain answers too."""
        self.proposers = list(proposers)
        self.learners = [p for p in learners if all(p is not q for q, _ in self.proposers)]

    def start(self, prompt: Sequence[int], regions: Sequence[Span]) -> None:
        for proposer, _ in self.proposers:
            proposer.reset(prompt)  # the draft model processes the prompt here

    def propose(self, state: DraftState) -> Proposal:
        """The first non-empty draft among the proposers, or an empty one that carries the
        time the tries took: the draft model's, as auto's empty model draft does (its
        source then books that time to the model), or the lookups'."""
        spec = state.spec
        empty = no_draft()
        for proposer, is_model in self.proposers:
            limits = DraftLimits(
                max_len=min(state.max_len, spec.draft_max if is_model else spec.ngram_draft_max),
                p_min=spec.fixed_p_min,
                min_match=spec.ngram_min_match,
                constraint=state.constraint,
                suffix=spec.suffix_drafts,
            )
            if limits.max_len <= 0:
                continue
            draft = proposer.propose(state.history, limits, state.sampler)
            if draft.tokens:
                return Proposal(replace(draft, seconds=draft.seconds + empty.seconds))
            source = draft.source if is_model else empty.source
            empty = replace(empty, source=source, seconds=empty.seconds + draft.seconds)
        return Proposal(empty)

    def observe(self, outcome: StepOutcome) -> None:
        """Fixed modes do not learn."""

    def finish(self, history: Sequence[int]) -> None:
        for proposer in [p for p, _ in self.proposers] + self.learners:
            proposer.finish(history)


@dataclass(frozen=True)
class RecordedStep:
    """One step of a recorded run: which proposer drafted (by its source name; the target's
    for a plain step) and how many tokens."""

    source: str
    drafted: int


class RecordedPolicy:
    """Proposes exactly the steps a recorded run took, from the same proposers, so that a
    replay of that run's output reproduces its steps (`localspec.speculative.simulate`).
    Past the end of the recording it decodes plainly."""

    def __init__(
        self, steps: Sequence[RecordedStep], proposers: Sequence[tuple[Proposer, bool]]
    ) -> None:
        self.steps = list(steps)
        self.by_source = {proposer.name: (proposer, is_model) for proposer, is_model in proposers}
        self._next = 0

    def start(self, prompt: Sequence[int], regions: Sequence[Span]) -> None:
        self._next = 0
        for proposer, _ in self.by_source.values():
            proposer.reset(prompt)

    def propose(self, state: DraftState) -> Proposal:
        step = self.steps[self._next] if self._next < len(self.steps) else None
        self._next += 1
        if step is None or step.drafted == 0:
            return Proposal(no_draft())
        if step.source not in self.by_source:
            raise UsageError(f"the recording drafted from {step.source!r}, which is not here")
        proposer, _ = self.by_source[step.source]
        limits = DraftLimits(min(step.drafted, state.max_len), constraint=state.constraint)
        return Proposal(proposer.propose(state.history, limits, state.sampler))

    def observe(self, outcome: StepOutcome) -> None:
        """A recording does not learn."""

    def finish(self, history: Sequence[int]) -> None:
        for proposer, _ in self.by_source.values():
            proposer.finish(history)
