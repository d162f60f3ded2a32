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
from typing import Protocol

import numpy as np

from localspec.errors import InvalidSettingsError
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.ngram import NGramIndex, NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits, Proposer
from localspec.speculative.sampling import Sampler, SamplingSettings
from localspec.speculative.shadows import matching_prefix
from localspec.speculative.sources import Span, source_intervals
from localspec.speculative.tuner import (
    DRAFT,
    NGRAM,
    NONE,
    STEADY_BEHIND,
    Choice,
    HardwareProfile,
    Tuner,
    ngram_key,
)
from localspec.speculative.verify import Verdict

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


StopRule = Callable[[int, float], bool]


class Policy(Protocol):
    """Decides each step's proposer and draft length and when a draft-model draft stops;
    `Tuner` is one."""

    def choose(self, ngram_match: int, ngram_available: int, draft_allowed: bool) -> Choice: ...

    def draft_stop(self, choice: Choice, limit: int) -> StopRule: ...

    def observe(
        self, choice: Choice, drafted: int, accepted: int, confidence: Sequence[float] = ()
    ) -> None: ...


class FixedPolicy:
    """The fixed modes: "none", "ngram" (when the match is >= min_match), "draft", "hybrid".

    "hybrid" drafts from the n-gram lookup when it has a long enough match, else from the
    draft model.
    """

    def __init__(self, proposer: str, k: int, min_match: int = 1, p_min: float = 0.0) -> None:
        if proposer not in (NONE, NGRAM, DRAFT, HYBRID):
            raise InvalidSettingsError(
                f"unknown proposer {proposer!r}: use none, ngram, draft or hybrid"
            )
        if proposer != NONE and k < 1:
            raise InvalidSettingsError("a drafting policy needs k >= 1")
        self.proposer, self.k, self.min_match, self.p_min = proposer, k, min_match, p_min

    def choose(self, ngram_match: int, ngram_available: int, draft_allowed: bool) -> Choice:
        use_ngram = self.proposer in (NGRAM, HYBRID) and ngram_available > 0
        if use_ngram and ngram_match >= self.min_match:
            key = ngram_key(ngram_match)
            return Choice(NGRAM, min(self.k, ngram_available), key, 0.0)
        if self.proposer in (DRAFT, HYBRID) and draft_allowed:
            return Choice(DRAFT, self.k, DRAFT, 0.0)
        return Choice(NONE, 0, NONE, 0.0)

    def draft_stop(self, choice: Choice, limit: int) -> StopRule:
        """At most k tokens, each with at least p_min confidence."""
        return lambda position, confidence: position < self.k and confidence >= self.p_min

    def observe(
        self, choice: Choice, drafted: int, accepted: int, confidence: Sequence[float] = ()
    ) -> None:
        """Fixed policies do not learn."""


class AutoPolicy:
    """What `--spec auto` runs, replayed through the runtime's own `AutoDrafter`.

    The replay drives the same code the engine does (the n-gram lookup, the tuner's choice,
    its shadow scoring of lookups it does not draft, the tuned early stop and what it learns
    from each step), with the draft model played by the trace (`RecordedDraft`), so the
    prediction cannot drift from what the runtime decides.
    """

    def __init__(self, profile: HardwareProfile, *, k_max: int = 8, seed: int = 0) -> None:
        self.tuner = Tuner(profile, k_max=k_max, explore_ngram=False, seed=seed)

    def drafter(self, ngram: NGramProposer, draft: Proposer | None) -> AutoDrafter:
        """The runtime's auto step over these proposers; the draft is "loaded" on first use,
        at no cost: a replay times the steps of one answer, not a process's start."""
        loader = None if draft is None else (lambda: draft)
        return AutoDrafter(self.tuner, ngram, loader, draft_ready=lambda: True)


class RecordedDraft:
    """The draft model as a trace recorded it: at each output position its greedy token was
    the target's or not (`-1`, which matches nothing, stands for a wrong one), with the
    probability it gave it (1.0 where none was recorded). A draft costs the profile's draft
    time per token plus the step overhead and the catch-up on tokens it has not seen, as in
    `replay`. Its cache starts empty, as the runtime's draft does in auto mode (it is not
    given the prompt up front)."""

    name = "draft"

    def __init__(
        self, trace: Trace, draft_s: float, step_overhead: float, catchup_per_token: float
    ) -> None:
        self.trace = trace
        self.draft_s, self.step_overhead, self.catchup = draft_s, step_overhead, catchup_per_token
        self._synced = 0  # the draft's cache holds the history up to here ...
        self._decoded: list[int] = []  # ... then these drafted tokens

    def reset(self, prompt: Sequence[int]) -> None:
        """Nothing up front (see the class docstring)."""

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
        for i in range(min(limits.max_len, len(output) - t)):
            sure = recorded[t + i] if recorded else 1.0
            if sure < limits.p_min:
                break
            if limits.keep_drafting is not None and not limits.keep_drafting(i, sure):
                break
            drafted.append(output[t + i] if self.trace.draft_agrees[t + i] else -1)
            confidence.append(sure)
        # like DraftModelProposer: every drafted token is decoded but a last one at max_len
        self._synced = len(tokens)
        self._decoded = drafted[:-1] if len(drafted) == limits.max_len else list(drafted)
        caught_up = max(behind - STEADY_BEHIND, 0) * self.catchup
        seconds = (len(drafted) + self.step_overhead + caught_up) * self.draft_s
        return Draft(drafted, self.name, seconds=seconds, confidence=tuple(confidence))


@dataclass(frozen=True)
class SimResult:
    """The replay's totals; `choices` counts steps by `Choice.label` ("none", "ngram:3")."""

    tokens: int
    seconds: float
    steps: int
    drafted: int = 0
    accepted: int = 0
    choices: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _agreeing_run(agrees: tuple[bool, ...], start: int, limit: int) -> int:
    """How many consecutive True from `start`, at most `limit`."""
    run = 0
    while run < limit and start + run < len(agrees) and agrees[start + run]:
        run += 1
    return run


def _draft_length(trace: Trace, t: int, choice: Choice, policy: Policy, k_max: int) -> int:
    """How long the draft model's draft at output position t is: the choice's k, or, when the
    trace recorded confidences, as long as the policy's early stop keeps going."""
    if not trace.draft_confidence:
        return choice.k
    keep = policy.draft_stop(choice, k_max)
    k = 0
    while t + k < len(trace.output) and k < k_max and keep(k, trace.draft_confidence[t + k]):
        k += 1
    return k


def replay(
    trace: Trace,
    policy: Policy | AutoPolicy,
    profile: HardwareProfile,
    *,
    k_max: int = 16,
    n_min: int = 2,
    n_max: int = 12,
    draft_step_overhead: float = 0.0,
    catchup_per_token: float = 0.0,
) -> SimResult:
    """Replay `trace` under `policy`, charging each step what `profile` says it costs.

    The lookup index uses the runtime's n-gram sizes (2..12) by default. A draft that runs past
    the end of the output still pays for its whole batch. The draft starts with the prompt
    processed; when it drafts after sitting out, it first catches up on the tokens it has not
    seen at `catchup_per_token` draft tokens each. An `AutoPolicy` runs the runtime's own auto
    step instead (`replay_auto`; `k_max` is then its tuner's).
    """
    if isinstance(policy, AutoPolicy):
        return replay_auto(
            trace,
            policy,
            profile,
            n_min=n_min,
            n_max=n_max,
            draft_step_overhead=draft_step_overhead,
            catchup_per_token=catchup_per_token,
        )
    output = trace.output
    index = NGramIndex(n_min, n_max)
    index.extend(trace.prompt)
    draft_allowed = profile.draft_s is not None
    draft_seen = len(trace.prompt)  # how much of the history the draft model has processed
    t, seconds, totals = 0, 0.0, _Totals()
    while t < len(output):
        continuation, match = index.lookup(k_max)
        behind = len(trace.prompt) + t - draft_seen
        choice = policy.choose(match, len(continuation), draft_allowed)
        if choice.proposer == NGRAM:
            k = min(choice.k, len(continuation))
            accepted = matching_prefix(continuation[:k], output[t : t + k])
            cost = profile.verify(k + 1)
        elif choice.proposer == DRAFT:
            if profile.draft_s is None:
                raise InvalidSettingsError(
                    "the policy chose the draft model, but the profile has none"
                )
            k = _draft_length(trace, t, choice, policy, k_max)
            accepted = _agreeing_run(trace.draft_agrees, t, k)
            caught_up = max(behind - STEADY_BEHIND, 0) * catchup_per_token
            cost = profile.verify(k + 1) + (k + draft_step_overhead + caught_up) * profile.draft_s
        else:
            k, accepted, cost = 0, 0, profile.verify(1)
        confidence = trace.draft_confidence[t : t + k] if choice.proposer == DRAFT else ()
        policy.observe(choice, k, accepted, confidence)
        emitted = min(accepted + 1, len(output) - t)
        index.extend(output[t : t + emitted])
        t += emitted
        if choice.proposer == DRAFT:  # it has seen all but the target's own token
            draft_seen = len(trace.prompt) + t - 1
        seconds += cost
        totals.add(choice.proposer, k, accepted)
    return totals.result(t, seconds)


def replay_auto(
    trace: Trace,
    policy: AutoPolicy,
    profile: HardwareProfile,
    *,
    n_min: int = 2,
    n_max: int = 12,
    draft_step_overhead: float = 0.0,
    catchup_per_token: float = 0.0,
) -> SimResult:
    """Replay `trace` through the runtime's `AutoDrafter` (see `AutoPolicy`): each step is
    proposed, verified (sample-and-compare against the recorded output, which is exact for
    greedy decoding) and observed as in `Engine.generate`, with the profile's costs as the
    measured times."""
    output = trace.output
    ngram = NGramProposer(n_min, n_max)
    ngram.reset(trace.prompt)
    draft = None
    if profile.draft_s is not None:
        draft = RecordedDraft(trace, profile.draft_s, draft_step_overhead, catchup_per_token)
    drafter = policy.drafter(ngram, draft)
    drafter.reset(trace.regions, len(trace.prompt))
    greedy = Sampler(SamplingSettings(), np.random.default_rng(0))
    history = list(trace.prompt)
    t, seconds, totals = 0, 0.0, _Totals()
    while t < len(output):
        proposal, choice = drafter.propose(history, len(output) - t - 1, None, greedy)
        k = len(proposal)
        accepted = matching_prefix(proposal.tokens, output[t : t + k])
        verify_s = profile.verify(k + 1)
        verdict = Verdict(k, accepted, list(output[t : t + accepted + 1]))
        drafter.observe(choice, proposal, verdict, verify_s, (k + 1,))
        history.extend(verdict.tokens)
        drafter.settle_shadows(history)
        t += len(verdict.tokens)
        seconds += verify_s + (proposal.seconds if choice.proposer == DRAFT else 0.0)
        totals.add(choice.proposer, k, accepted)
    return totals.result(t, seconds)


@dataclass
class _Totals:
    """What a replay counts step by step."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    choices: Counter[str] = field(default_factory=Counter)

    def add(self, proposer: str, drafted: int, accepted: int) -> None:
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted
        # the label of what ran: an n-gram choice with nothing to draft is a plain step
        self.choices[NONE if drafted == 0 else f"{proposer}:{drafted}"] += 1

    def result(self, tokens: int, seconds: float) -> SimResult:
        return SimResult(
            tokens, seconds, self.steps, self.drafted, self.accepted, dict(self.choices)
        )


def compare(
    traces: Iterable[Trace],
    policies: Mapping[str, Callable[[], Policy | AutoPolicy]],
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
    trace: Trace, profile: HardwareProfile, *, k_max: int = 16, draft_step_overhead: float = 0.0
) -> SimResult:
    """The speed of a policy that knows, each step, how much of each proposal will be accepted.

    Each step it drafts the part (a prefix of what will be accepted, so nothing is ever
    rejected) of an n-gram lookup (of any source the trace's regions name) or of the draft
    model's run that makes that step fastest, or nothing. No real policy can know this. It
    is greedy per step, so not a proven optimum, but it is the reference for how much
    speculation could gain on a trace and a machine, and so for how much a policy leaves on
    the table.
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
        for intervals in sources:
            continuation, _ = index.lookup(k_max, within=intervals)
            copied = max(copied, matching_prefix(continuation, output[t : t + len(continuation)]))
        copied = min(copied, useful)
        for k in range(1, copied + 1):
            cost = profile.verify(k + 1)
            options.append(((k + 1) / cost, f"{NGRAM}:{k}", k, cost))
        if profile.draft_s is not None:
            for k in range(1, _agreeing_run(trace.draft_agrees, t, min(k_max, useful)) + 1):
                cost = profile.verify(k + 1) + (k + draft_step_overhead) * profile.draft_s
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
