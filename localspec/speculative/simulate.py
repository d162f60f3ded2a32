"""What-if replays of greedy speculative decoding against a cost model: no model, no I/O.

A `Trace` records what one greedy generation produced and, per output position, whether the
draft model's greedy token agreed with the target's. Under greedy decoding that is all that
decides which drafts are accepted, so a trace recorded once (on any machine) can be replayed
under any drafting policy and any `HardwareProfile`. This predicts each policy's speed on
hardware you do not have: on a GPU where verifying 8 tokens costs ~1.1x one token and a draft
token 0.1x, long drafts pay; on the 2-core CPU of NOTES.md, where a batch of 8 costs 3.9x one
token, only long n-gram matches do. It is also how the tuner is checked against every fixed
setting without running a model.

The replay charges what the profile measures: target verification and draft-model tokens.
When asked for, a draft-model step also costs `draft_step_overhead` draft tokens more (its
catching up on the target's own token and its per-step work, which the profile's one-token
figure leaves out; measured on the 2-core CPU, a step drafting k tokens took ~k + 0.9 draft
tokens' time), and a draft returning after sitting out pays `catchup_per_token` draft tokens
per token it missed. Lookup time is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar, Protocol

import numpy as np

from localspec.errors import InvalidSettingsError
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.draft_model import DRAFT_SOURCE
from localspec.speculative.engine import Engine, Finished, GenerationRequest
from localspec.speculative.ngram import NGramIndex, NGramProposer
from localspec.speculative.policy import (
    DraftPolicy,
    DraftState,
    FixedDrafts,
    Proposal,
    RecordedPolicy,
    RecordedStep,
    StepOutcome,
)
from localspec.speculative.proposer import Draft, DraftLimits, Proposer
from localspec.speculative.replay_context import ReplayContext, ReplayVocabulary
from localspec.speculative.sampling import Sampler
from localspec.speculative.settings import SpecMode, SpecSettings
from localspec.speculative.shadows import matching_prefix
from localspec.speculative.sources import Span, source_intervals
from localspec.speculative.suffix import SuffixStore, tree_lookup
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import (
    DRAFT,
    NGRAM,
    NONE,
    STEADY_BEHIND,
    HardwareProfile,
    Tuner,
    chunked_cost,
)

HYBRID = "hybrid"


@dataclass(frozen=True)
class Trace:
    """One greedy generation: `draft_agrees[t]` says the draft's greedy token at t was output[t].

    `draft_confidence[t]`, when recorded, is the probability the draft gave its greedy token
    at t; with it the replay lets the policy's early stop end draft-model drafts. It is the
    draft's confidence after the true output so far, which is what it sees while its draft
    is still being accepted; after a rejection the replay's later confidences are only an
    approximation of what the draft would have seen, but by then nothing more is accepted.
    """

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    draft_agrees: tuple[bool, ...]
    category: str = ""
    draft_confidence: tuple[float, ...] = ()
    # the prompt's named parts (a FIM prompt's suffix and extra chunks), as the runtime's
    # request gives them, so `auto` looks them up apart as it does live
    regions: tuple[Span, ...] = ()
    # the answer ended by itself (an end token), not at the run's max_tokens: drafts near
    # its end may run past it, and a last step finds the end token, as live
    ended: bool = False
    # what the runtime's tuner learned this answer under (`localspec.runtime.route_key`): a
    # replayed session keeps one tuner per route, as the runtime does
    route: str = ""

    def __post_init__(self) -> None:
        recorded: list[tuple[str, Sequence[object]]] = [("draft_agrees", self.draft_agrees)]
        if self.draft_confidence:
            recorded.append(("draft_confidence", self.draft_confidence))
        for name, values in recorded:
            if len(values) != len(self.output):
                raise ValueError(
                    f"{name} has {len(values)} entries for {len(self.output)} output tokens: "
                    "record one per output position"
                )


class ReplayPolicy(Protocol):
    """A drafting policy to replay: the request settings it runs under and, given the
    replay's proposers (the lookup and the recorded draft model), the engine's policy."""

    spec: SpecSettings

    def policy(self, ngram: NGramProposer, draft: RecordedDraft | None) -> DraftPolicy: ...


class FixedPolicy:
    """The fixed modes: "none", "ngram" (when the match is >= min_match), "draft", "hybrid",
    drafting at most k tokens (a draft model's each with at least p_min confidence).

    "hybrid" drafts from the n-gram lookup when it has a long enough match, else from the
    draft model.
    """

    _MODES: ClassVar[dict[str, SpecMode]] = {
        NONE: SpecMode.OFF,
        NGRAM: SpecMode.NGRAM,
        DRAFT: SpecMode.DRAFT,
        HYBRID: SpecMode.HYBRID,
    }

    def __init__(self, proposer: str, k: int, min_match: int = 1, p_min: float = 0.0) -> None:
        if proposer not in self._MODES:
            raise InvalidSettingsError(
                f"unknown proposer {proposer!r}: use none, ngram, draft or hybrid"
            )
        if proposer != NONE and k < 1:
            raise InvalidSettingsError("a drafting policy needs k >= 1")
        self.mode = self._MODES[proposer]
        self.spec = SpecSettings(
            self.mode, draft_max=k, p_min=p_min, ngram_draft_max=k, ngram_min_match=min_match
        )

    def policy(self, ngram: NGramProposer, draft: RecordedDraft | None) -> DraftPolicy:
        proposers: list[tuple[Proposer, bool]] = []
        if self.mode in (SpecMode.NGRAM, SpecMode.HYBRID):
            proposers.append((ngram, False))
        if self.mode in (SpecMode.DRAFT, SpecMode.HYBRID) and draft is not None:
            proposers.append((draft, True))
        return FixedDrafts(proposers)


class AutoPolicy:
    """What `--spec auto` runs: the runtime's own `AutoDrafter` (the n-gram lookup, the
    tuner's choice, its shadow scoring of lookups it does not draft, the tuned early stop and
    what it learns from each step), with the draft model played by the trace.

    The draft is "loaded" on first use, at no cost: a replay times the steps of one answer,
    not a process's start. It starts with an empty cache, as the runtime's does, unless
    `draft_primed`: then it holds the prompt, as a fixed mode's does (to compare the two).
    `suffix` False: without suffix drafts (`auto+no-suffix`)."""

    def __init__(
        self,
        profile: HardwareProfile,
        *,
        k_max: int = 8,
        seed: int = 0,
        draft_primed: bool = False,
        suffix: bool = True,
    ) -> None:
        self.spec = SpecSettings(SpecMode.AUTO, suffix_drafts=suffix)
        self.tuner = Tuner(profile, k_max=k_max, explore_ngram=False, seed=seed)
        self.draft_primed = draft_primed

    def policy(self, ngram: NGramProposer, draft: RecordedDraft | None) -> DraftPolicy:
        if draft is None:
            return AutoDrafter(self.tuner, ngram)
        loaded = None
        if self.draft_primed:
            draft.reset(draft.trace.prompt)
            loaded = draft
        return AutoDrafter(self.tuner, ngram, lambda: draft, lambda: True, loaded=loaded)


class Rerun:
    """The steps a recorded run took, proposed again from the replay's proposers
    (`RecordedPolicy`): its replay reproduces the run's steps and accepted tokens."""

    spec = SpecSettings(SpecMode.OFF)

    def __init__(self, steps: Sequence[RecordedStep]) -> None:
        self.steps = steps

    def policy(self, ngram: NGramProposer, draft: RecordedDraft | None) -> DraftPolicy:
        proposers: list[tuple[Proposer, bool]] = [(ngram, False)]
        if draft is not None:
            proposers.append((draft, True))
        return RecordedPolicy(self.steps, proposers)


class RecordedDraft:
    """The draft model as a trace recorded it: at each output position its greedy token was
    the target's or not (`-1`, which matches nothing, stands for a wrong one), with the
    probability it gave it (1.0 where none was recorded). A draft costs the profile's draft
    time per token plus the step overhead and the catch-up on tokens it has not seen, as in
    `replay`. Its cache starts empty, as the runtime's draft does in auto mode (it is not
    given the prompt up front); a fixed mode's is (`reset`)."""

    name = DRAFT_SOURCE

    def __init__(
        self, trace: Trace, draft_s: float, step_overhead: float, catchup_per_token: float
    ) -> None:
        self.trace = trace
        self.draft_s, self.step_overhead, self.catchup = draft_s, step_overhead, catchup_per_token
        self._synced = 0  # the draft's cache holds the history up to here ...
        self._decoded: list[int] = []  # ... then these drafted tokens

    def reset(self, prompt: Sequence[int]) -> None:
        """The prompt processed, as a fixed mode's draft model processes it up front."""
        self._synced, self._decoded = len(prompt), []

    def finish(self, tokens: Sequence[int]) -> None:
        """Frozen, like the real draft."""

    def behind(self, tokens: Sequence[int]) -> int:
        start = self._synced
        return len(tokens) - start - matching_prefix(self._decoded, tokens[start:])

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        behind = self.behind(tokens)
        t = len(tokens) - len(self.trace.prompt)
        output, recorded = self.trace.output, self.trace.draft_confidence
        drafted: list[int] = []
        confidence: list[float] = []
        # past the answer's end the draft drafts on, wrongly, unless its confidence there
        # would decide (it was not recorded)
        length = limits.max_len if not recorded else min(limits.max_len, len(output) - t)
        for i in range(length):
            past = t + i >= len(output)
            sure = recorded[t + i] if recorded and not past else 1.0
            if sure < limits.p_min:
                break
            if limits.keep_drafting is not None and not limits.keep_drafting(i, sure):
                break
            agrees = not past and self.trace.draft_agrees[t + i]
            drafted.append(output[t + i] if agrees else -1)
            confidence.append(sure)
        # like DraftModelProposer: every drafted token is decoded but a last one at max_len
        self._synced = len(tokens)
        self._decoded = drafted[:-1] if len(drafted) == limits.max_len else list(drafted)
        caught_up = max(behind - STEADY_BEHIND, 0) * self.catchup
        seconds = (len(drafted) + self.step_overhead + caught_up) * self.draft_s
        return Draft(drafted, self.name, seconds=seconds, confidence=tuple(confidence))


@dataclass(frozen=True)
class SimResult:
    """The replay's totals; `choices` counts steps by `Choice.label` ("none", "ngram:3"), and
    `outcomes` are the steps themselves."""

    tokens: int
    seconds: float
    steps: int
    drafted: int = 0
    accepted: int = 0
    choices: dict[str, int] = field(default_factory=dict)
    outcomes: tuple[StepOutcome, ...] = field(default=(), compare=False, repr=False)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _Watched:
    """A policy whose every step outcome is kept for the replay's totals."""

    def __init__(self, inner: DraftPolicy) -> None:
        self.inner = inner
        self.outcomes: list[StepOutcome] = []

    def start(self, prompt: Sequence[int], regions: Sequence[Span]) -> None:
        self.inner.start(prompt, regions)

    def propose(self, state: DraftState) -> Proposal:
        return self.inner.propose(state)

    def observe(self, outcome: StepOutcome) -> None:
        self.outcomes.append(outcome)
        self.inner.observe(outcome)

    def finish(self, history: Sequence[int]) -> None:
        self.inner.finish(history)


def replay(
    trace: Trace,
    policy: ReplayPolicy,
    profile: HardwareProfile,
    *,
    n_min: int = 2,
    n_max: int = 12,
    draft_step_overhead: float = 0.0,
    catchup_per_token: float = 0.0,
    store: SuffixStore | None = None,
) -> SimResult:
    """Replay `trace` under `policy` through the engine's own step, charging each decode
    what `profile` says it costs and each draft-model draft its recorded cost.

    `store` is the suffix store the lookup drafts from; a policy that drafts with the lookup
    teaches it the trace at its end (hold it, `SuffixStore.holding`, to replay one trace
    under several policies).

    The target is the trace's recorded answer (`ReplayContext`), the lookup the runtime's
    (n-gram sizes 2..12 by default), the draft model the trace's record of it
    (`RecordedDraft`: a step costs `draft_step_overhead` draft tokens beyond those drafted,
    and `catchup_per_token` draft tokens for each token it has not seen). Prompt processing
    costs nothing, but for the decode that gives the first token.
    """
    target = ReplayContext(trace.prompt, trace.output, profile, ends=trace.ended)
    ngram = NGramProposer(n_min, n_max, store=store)
    draft = None
    if profile.draft_s is not None:
        draft = RecordedDraft(trace, profile.draft_s, draft_step_overhead, catchup_per_token)
    guard = replay_guard(profile, policy.spec)
    chosen = policy.policy(ngram, draft)
    if isinstance(chosen, AutoDrafter):
        chosen.verifies_with(guard)
    watched = _Watched(chosen)
    engine = Engine(target, ReplayVocabulary(target.end_token), now=target.now, ties=guard)
    request = GenerationRequest(
        trace.prompt,
        # an answer that ended by itself ends at its end token, whatever is left to draft
        max_tokens=target.n_ctx if trace.ended else len(trace.output),
        spec=policy.spec,
        route="whatif",
        regions=trace.regions,
    )
    tokens = 0
    for event in engine.generate(request, policy=watched):
        if isinstance(event, Finished):
            tokens = len(event.tokens)
    outcomes = tuple(watched.outcomes)
    drafts = [o.proposal.draft for o in outcomes]
    drafting = sum(draft.seconds for draft in drafts if draft.source == DRAFT_SOURCE)
    choices = Counter(_label(o) for o in outcomes)
    return SimResult(
        tokens=tokens,
        seconds=target.seconds + drafting,
        steps=len(outcomes),
        drafted=sum(len(o.proposal.draft) for o in outcomes),
        accepted=sum(o.verdict.accepted for o in outcomes),
        choices=dict(choices),
        outcomes=outcomes,
    )


def replay_guard(profile: HardwareProfile, spec: SpecSettings) -> TieGuard | None:
    """The tie guard the runtime gives a greedy request on `profile`'s machine: verification
    then decodes exact-width chunks (one token at a time where no batch size is exact), each
    charged as its own decode. None where the profile measured no kernel noise (an assumed
    profile) or `spec` lets the batch decide (`+batch-ties`): one batch."""
    if not profile.tie_noise or not spec.redecode_ties:
        return None
    return TieGuard(profile.tie_noise)


def _label(outcome: StepOutcome) -> str:
    """The label of what ran: an n-gram choice with nothing to draft is a plain step."""
    draft = outcome.proposal.draft
    if not draft.tokens:
        return NONE
    return f"{DRAFT if draft.source == DRAFT_SOURCE else NGRAM}:{len(draft)}"


def _verify_cost(profile: HardwareProfile, chunk: int | None, drafted: int, first: bool) -> float:
    """A step's verification of `drafted` tokens: the pending token and the draft, in
    `chunk`-token decodes; on the first step the prefill already decoded the pending token
    (charged as a plain step), so only the draft is decoded, as in the runtime."""
    if first:
        return profile.verify(1) + chunked_cost(profile.verify, drafted, chunk)
    return chunked_cost(profile.verify, drafted + 1, chunk)


def _agreeing_run(agrees: tuple[bool, ...], start: int, limit: int) -> int:
    """How many consecutive True from `start`, at most `limit`."""
    run = 0
    while run < limit and start + run < len(agrees) and agrees[start + run]:
        run += 1
    return run


def compare(
    traces: Iterable[Trace],
    policies: Mapping[str, Callable[[], ReplayPolicy]],
    profile: HardwareProfile,
) -> dict[str, float]:
    """Median over traces of each policy's tokens/s divided by plain decoding's on that trace.

    Every trace gets a fresh policy from its factory, so nothing learned carries over.
    """
    ratios: dict[str, list[float]] = {name: [] for name in policies}
    for trace in traces:
        plain = replay(trace, FixedPolicy(NONE, 0), profile).tokens_per_second
        for name, factory in policies.items():
            speed = replay(trace, factory(), profile).tokens_per_second
            ratios[name].append(speed / plain)
    return {name: float(np.median(values)) for name, values in ratios.items()}


def hindsight(
    trace: Trace,
    profile: HardwareProfile,
    *,
    k_max: int = 16,
    draft_step_overhead: float = 0.0,
    store: SuffixStore | None = None,
    chunk: int | None = None,
) -> SimResult:
    """The speed of a policy that knows, each step, how much of each proposal will be accepted.

    Each step it drafts the part (a prefix of what will be accepted, so nothing is ever
    rejected) of an n-gram lookup (of any source the trace's regions name, and the suffix
    drafts: the sequence's own and, given a `store`, the store's) or of the draft model's
    run that makes that step fastest, or nothing. No real policy can know this. It
    is greedy per step, so not a proven optimum, but it is the reference for how much
    speculation could gain on a trace and a machine, and so for how much a policy leaves on
    the table. `chunk`: greedy verification's exact width on that machine (`replay_guard`),
    whose chunks each cost a decode, as the runtime's verification and the replay's do.
    """
    output = trace.output
    index = NGramIndex(2, 12)
    index.extend(trace.prompt)
    sources = source_intervals(trace.regions, len(trace.prompt)).values()
    t, seconds, steps, accepted_total = 0, 0.0, 0, 0
    choices: Counter[str] = Counter()
    while t < len(output):
        # each way to take this step: (tokens per second, label, accepted, cost); plain first,
        # and a draft only replaces it when strictly faster
        options = [(1.0 / profile.verify(1), NONE, 0, profile.verify(1))]
        useful = len(output) - t - 1  # the last token comes with the verification anyway
        copied = 0  # the most any source's lookup would have had accepted
        lookups = [index.lookup(k_max, within=intervals)[0] for intervals in sources]
        lookups.append(tree_lookup(index, k_max).tokens)
        if store is not None:
            lookups.append(store.lookup(index.tokens, k_max).tokens)
        for continuation in lookups:
            copied = max(copied, matching_prefix(continuation, output[t : t + len(continuation)]))
        copied = min(copied, useful)
        verify = partial(_verify_cost, profile, chunk, first=t == 0)
        for k in range(1, copied + 1):
            cost = verify(k)
            options.append(((k + 1) / cost, f"{NGRAM}:{k}", k, cost))
        if profile.draft_s is not None:
            for k in range(1, _agreeing_run(trace.draft_agrees, t, min(k_max, useful)) + 1):
                cost = verify(k) + (k + draft_step_overhead) * profile.draft_s
                options.append(((k + 1) / cost, f"{DRAFT}:{k}", k, cost))
        best = options[0]
        for option in options[1:]:
            if option[0] > best[0]:
                best = option
        _, label, accepted, cost = best
        emitted = min(accepted + 1, len(output) - t)
        index.extend(output[t : t + emitted])
        t += emitted
        seconds += cost
        steps += 1
        accepted_total += accepted
        choices[label] += 1
    return SimResult(t, seconds, steps, accepted_total, accepted_total, dict(choices))
