"""`auto` mode: the tuner decides each step between plain decoding, the n-gram and the draft.

The n-gram lookup runs every step (it costs microseconds) because its match length is what
the tuner needs to judge it. Where the request names regions of its prompt (a FIM prompt's
suffix and extra chunks), each is looked up apart, and the session's n-gram cache too: every
source that has a match is an option the tuner weighs by the acceptance it learned for that
source and match length (`localspec.speculative.sources`). A lookup the tuner does not
draft is still scored against the tokens the target then produces ("shadow" observations):
the acceptance of sample-and-compare is exactly whether those tokens equal the proposal, so
the tuner learns how good n-gram drafts would be without paying a wider verification for it.
The draft model is loaded only the first time the tuner picks it and is never run while the
tuner holds it off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from localspec.speculative.costs import ExplorationBudget
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.policy import DraftState, Proposal, StepOutcome, no_draft
from localspec.speculative.proposer import Draft, DraftLimits, Proposer
from localspec.speculative.shadows import ShadowLookups
from localspec.speculative.sources import Interval, Span, source_intervals
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import DRAFT, NGRAM, NONE, Choice, Tuner, ngram_key

DraftLoader = Callable[[], Proposer]


@runtime_checkable
class CatchesUp(Protocol):
    """A model proposer that can say how far its cache is behind the sequence."""

    def behind(self, tokens: Sequence[int]) -> int: ...


@runtime_checkable
class MayNotRead(Protocol):
    """A model proposer that cannot read every sequence (a draft whose vocabulary lacks
    padding its target has: `DraftModelProposer.can_draft`)."""

    def can_draft(self, tokens: Sequence[int]) -> bool: ...


class AutoDrafter:
    """`auto`'s drafting policy (`localspec.speculative.policy.DraftPolicy`): turns the
    tuner's choice into a draft, and its outcome into tuner observations."""

    def __init__(
        self,
        tuner: Tuner,
        ngram: NGramProposer,
        draft_loader: DraftLoader | None = None,
        draft_ready: Callable[[], bool] | None = None,
        *,
        loaded: Proposer | None = None,
    ) -> None:
        """`draft_ready` says whether the loader would return at once (the runtime holds the
        draft already): only then is loading not a cost of choosing it. `loaded` is a draft
        already loaded, holding what it was last given."""
        self.tuner = tuner
        self.ngram = ngram
        self.draft_loader = draft_loader
        self.draft_ready = draft_ready or (lambda: False)
        self._draft: Proposer | None = loaded
        self._shadows = ShadowLookups(tuner.acceptance)
        self._sources: dict[str, list[Interval]] = {}  # none: one lookup of the whole sequence
        self._budget: ExplorationBudget | None = None  # the request's, set at its first step
        self.verify_chunk: int | None = None  # the request's: see `verifies_with`

    def verifies_with(self, guard: TieGuard | None) -> None:
        """The request's tie guard (None: none): its exact-width chunks are what greedy
        verification decodes, so they are what the tuner prices each draft length at. Kept
        here, with the request, and handed to the route's shared tuner on every call."""
        self.verify_chunk = guard.exact_width if guard else None

    def start(self, prompt: Sequence[int], regions: Sequence[Span] = ()) -> None:
        """A new generation from `prompt`: proposals about the previous one can no longer be
        scored. `regions` name the parts of the prompt that the lookup searches apart, each
        as its own source (`localspec.speculative.sources`). The draft model is not given
        the prompt: it catches up if and when the tuner picks it."""
        self.ngram.reset(prompt)
        self._shadows.clear()
        self._budget = None
        self._sources = source_intervals(regions, len(prompt)) if regions else {}

    def finish(self, history: Sequence[int]) -> None:
        self.ngram.finish(history)

    def propose(self, state: DraftState) -> Proposal:
        """This step's draft and the choice behind it. A draft-model draft may run past the
        chosen k up to the tuner's k_max while its tokens are confident enough to pay (the
        tuned early stop); the returned choice carries the length actually drafted. Under a
        constraint the lookup is cut before the tuner sees its length (and before it is
        kept as a shadow), and the draft model drafts under the mask."""
        history, max_len, constraint = state.history, state.max_len, state.constraint
        if max_len <= 0:
            return Proposal(no_draft(), Choice(NONE, 0, NONE, 0.0))
        lookup_limits = DraftLimits(
            min(max_len, self.tuner.k_max),
            constraint=constraint,
            suffix=state.spec.suffix_drafts,
        )
        lookups = self.ngram.lookups(history, lookup_limits, self._sources)
        keys = [ngram_key(lookup.match, lookup.source) for lookup in lookups]
        if self._budget is None:
            self._budget = self.tuner.exploration_budget(state.horizon)
        choice = self.tuner.choose(
            [(key, len(lookup.draft)) for key, lookup in zip(keys, lookups, strict=True)],
            self.draft_loader is not None and self._draft_can_read(history),
            draft_behind=self._draft_behind(history),
            remaining=state.horizon,
            budget=self._budget,
            draft_loaded=self._draft is not None or self.draft_ready(),
            chunk=self.verify_chunk,
        )
        if choice.k > max_len:  # near max_tokens or the end of the context
            choice = replace(choice, k=max_len)
        k = choice.k
        chosen: Draft | None = None
        for key, lookup in zip(keys, lookups, strict=True):
            if choice.proposer == NGRAM and choice.key == key:
                chosen = lookup.draft
            else:  # every lookup not drafted is scored against what the target produces
                self._shadows.add(key, lookup.draft.tokens, len(history))
        seconds = lookups[0].draft.seconds if lookups else 0.0
        if chosen is not None:
            return Proposal(replace(chosen, tokens=chosen.tokens[:k], seconds=seconds), choice)
        if choice.proposer == DRAFT and self.draft_loader is not None:
            if self._draft is None:  # loaded, the choice above already asked whether it reads
                self._draft = self._load(self.draft_loader)
                if not self._draft_can_read(history):  # known only now: a plain step
                    plain = self.tuner.choose([], draft_allowed=False)
                    return Proposal(replace(no_draft(), seconds=seconds), plain)
            limit = min(self.tuner.k_max, max_len)
            stop = self.tuner.draft_stop(choice, limit, self.verify_chunk)
            p_min = state.spec.p_min or 0.0
            limits = DraftLimits(limit, p_min, keep_drafting=stop, constraint=constraint)
            draft = self._draft.propose(history, limits, state.sampler)
            return Proposal(draft, replace(choice, k=len(draft)))
        return Proposal(replace(no_draft(), seconds=seconds), choice)

    def _load(self, loader: DraftLoader) -> Proposer:
        """The draft model, timing its load where it really loads (what the tuner prices the
        next switch to an unloaded draft at)."""
        ready = self.draft_ready()
        started = time.perf_counter()
        draft = loader()
        if not ready:
            self.tuner.costs.draft_load_s = time.perf_counter() - started
        return draft

    def _draft_can_read(self, history: Sequence[int]) -> bool:
        """False where the loaded draft lacks a token of `history`: it would draft nothing,
        and an empty draft priced as a catch-up would teach the shared costs a false one."""
        draft = self._draft
        return not isinstance(draft, MayNotRead) or draft.can_draft(history)

    def _draft_behind(self, history: Sequence[int]) -> int:
        """Tokens the draft model would process before drafting (all of them if not loaded)."""
        if self.draft_loader is None:
            return 0
        if self._draft is None:
            return len(history)
        return self._draft.behind(history) if isinstance(self._draft, CatchesUp) else 0

    def observe(self, outcome: StepOutcome) -> None:
        """Fold one verified step into the tuner: what it yielded against the prediction,
        acceptance (per draft confidence too) and the measured draft and verification times;
        then score the shadow lookups against the tokens the step produced. `outcome.decoded`
        are the sizes of the verification's decodes (exact-width chunks, or one batch) that
        `verify_s` paid for."""
        choice, draft, verdict = outcome.proposal.choice, outcome.proposal.draft, outcome.verdict
        if choice is None:
            raise ValueError("auto observes only its own proposals")
        self.tuner.observe_step(choice, len(verdict.tokens))
        self.tuner.observe(choice, verdict.drafted, verdict.accepted, draft.confidence)
        self.tuner.observe_costs(
            choice, len(draft), draft.seconds, outcome.verify_s, outcome.decoded
        )
        self.settle_shadows(outcome.history)

    def settle_shadows(self, history: Sequence[int]) -> None:
        """Score pending shadow proposals against the tokens produced since they were made."""
        self._shadows.settle(history)
