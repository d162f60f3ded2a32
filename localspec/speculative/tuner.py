"""The auto-tuner: each step, pick the proposer and draft length with the best expected speed.

For a draft of k tokens whose position j is accepted with probability a_j given that all
earlier positions were (estimated online, per proposer and per n-gram match length), the
expected number of tokens one verification yields is 1 + sum_{i<=k} prod_{j<=i} a_j. Its cost
is the measured time to verify a batch of k + 1 tokens, plus k draft-model steps when the
draft model proposes. Plain decoding yields 1 token per verify(1). The tuner takes the option
with the most expected tokens per second, so on hardware where batches are expensive it holds
speculation off, and where they are nearly free it drafts long.

The calibration is a starting point, not the truth: during generation each step's measured
verification time (per batch size) and draft time are compared with what the profile
predicted, and the tuner's costs follow the measurements (an exponential average of the
ratio for verification, of the extra seconds per step for the draft model, which include
its catching up on tokens other proposers produced). A machine that is busier or a draft
that costs more than its calibration said is therefore noticed within a few steps.

A small exploration budget (a fraction of steps spent on the best option of another
proposer) keeps the estimates of options not currently chosen from going stale, and old
observations decay so a change of workload is noticed within a few dozen steps. What the
drafts it chooses really yield, against what the acceptance model expected of them,
corrects each proposer's predicted speeds (`localspec.speculative.payoff`): a draft is
chosen where its measured yield, not the model's hope, beats plain decoding. A batch size no
step has measured lately is priced by the overall measured ratio, so a slow moment (the
first steps after loading) cannot price plain decoding out for good.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from localspec.speculative.acceptance_rates import (
    DRAFT,
    NONE,
    PRIORS,
    AcceptanceModel,
    confidence_key,
    expected_tokens,
)
from localspec.speculative.costs import EXPLORE_SHARE, ExplorationBudget, LiveCosts
from localspec.speculative.payoff import Payoff
from localspec.speculative.sources import (
    CONTEXT,
    NGRAM,
    ngram_bucket,
    ngram_key,
    ngram_key_source,
)

# named where they are defined, used here and by the tuner's callers
__all__ = [
    "DRAFT",
    "NGRAM",
    "NONE",
    "PRIORS",
    "AcceptanceModel",
    "confidence_key",
    "expected_tokens",
    "ngram_bucket",
    "ngram_key",
]

# A token the draft catches up on in a batch costs about this share of a one-token draft
# decode before it is measured (prompt processing runs ~3x faster per token than decoding).
CATCHUP_PRIOR = 0.35
# in continuous use the draft catches up on its last drafted token and the target's own
STEADY_BEHIND = 2
# without a token budget, the rest of a generation is assumed this long; and a one-off cost
# (the draft model catching up on a prompt) must pay for itself within this many tokens,
# however long the request's budget: agents ask for 32000 and stop after a few hundred
DEFAULT_HORIZON = 256


def payoff_source(proposer: str, key: str) -> str:
    """What a draft's measured payoff is kept under: the draft model, or the n-gram source
    its lookup searched ("ngram" for the sequence itself, "ngram/suffix", "ngram/extra",
    "ngram/session"), whatever the match length. Sources differ in what their shadows
    promise: in an editor's FIM session the session cache's lookups scored 85% as shadows
    and 29% drafted, while the suffix's drafts yielded what was expected; one factor for
    all n-gram sources let the suffix's gains keep the session's losing drafts chosen."""
    if proposer != NGRAM:
        return proposer
    source = ngram_key_source(key)
    return NGRAM if source == CONTEXT else f"{NGRAM}/{source}"


def chunked_cost(verify: Callable[[int], float], batch: int, width: int | None) -> float:
    """Seconds to verify `batch` tokens to the end with `verify` pricing one decode: one
    batch, or (`width`: greedy verification's exact width, `localspec.speculative.ties`)
    every exact-width chunk in turn."""
    if width is None or batch <= width:
        return verify(batch)
    full, rest = divmod(batch, width)
    return full * verify(width) + (verify(rest) if rest else 0.0)


@dataclass(frozen=True)
class HardwareProfile:
    """Measured costs in seconds: verify_s[b - 1] decodes a batch of b tokens on the target.

    `tie_noise[b - 1]` is the largest change batching b tokens made to the target's top-token
    gaps (`localspec.speculative.ties`): a property of the build and machine, like the costs.
    `catchup_s` is what the draft pays per token it catches up on in one batch (its first pass
    over a prompt, its return after sitting out): on a CPU about a third of a draft token, on
    a GPU next to nothing. None where it was not measured: the tuner then assumes
    CATCHUP_PRIOR draft tokens a token until it has measured one.
    """

    verify_s: tuple[float, ...]
    draft_s: float | None = None  # one draft-model token; None when there is no draft model
    tie_noise: tuple[float, ...] = ()
    catchup_s: float | None = None

    @property
    def catchup_per_token(self) -> float:
        """A caught-up token's cost in draft tokens (measured, else the prior)."""
        if self.catchup_s is None or not self.draft_s:
            return CATCHUP_PRIOR
        return self.catchup_s / self.draft_s

    def verify(self, batch: int) -> float:
        if batch <= len(self.verify_s):
            return self.verify_s[batch - 1]
        # beyond what was measured: extend the last measured slope
        last, before = self.verify_s[-1], self.verify_s[-2] if len(self.verify_s) > 1 else 0.0
        return last + (batch - len(self.verify_s)) * max(last - before, 0.0)

    def draft_can_ever_pay(self, k_max: int, margin: float = 1.1) -> bool:
        """Whether a perfectly accepted draft of some length beats plain decoding by `margin`.

        The margin is there because using the draft has costs this profile does not hold: its
        first use processes the whole context, and it catches up after steps it sat out. A
        draft that could at best match plain decoding is not worth loading or exploring.
        """
        if self.draft_s is None:
            return False
        plain = margin / self.verify(1)
        return any(
            (k + 1) / (self.verify(k + 1) + k * self.draft_s) > plain for k in range(1, k_max + 1)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verify_s": list(self.verify_s),
            "draft_s": self.draft_s,
            "tie_noise": list(self.tie_noise),
            "catchup_s": self.catchup_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareProfile:
        return cls(
            tuple(float(x) for x in data["verify_s"]),
            data.get("draft_s"),
            tuple(float(x) for x in data.get("tie_noise", ())),
            data.get("catchup_s"),
        )


@dataclass(frozen=True)
class Choice:
    """What the tuner decided for one step, and the speed it expected."""

    proposer: str
    k: int
    key: str
    predicted_tokens_per_s: float
    explored: bool = False
    draft_behind: int = 0  # tokens the draft model had to catch up on when this was chosen
    # the one-off seconds of switching to the draft model: its catch-up, its loading
    switch_s: float = 0.0
    # the speed the models predict, before the measured payoff corrects it
    modelled_tokens_per_s: float = 0.0

    @property
    def label(self) -> str:
        return NONE if self.proposer == NONE else f"{self.proposer}:{self.k}"


class DraftStop:
    """The tuned early stop of one draft-model draft, asked before each drafted token.

    Drafting one more token is an investment: it costs a draft step and widens the
    verification batch, and it returns the chance that it and everything before it are
    accepted (its confidence band's rate) plus what the tokens after it may add (the
    per-position draft rates). Long-run speed is highest when every such investment returns
    more tokens per second than the speed the step's option already expects, so the draft
    goes on exactly while some continuation of 1..limit-position tokens clears that bar.
    A band that is rarely accepted thus ends drafts on a CPU, where a wider batch is costly,
    and is drafted through on a GPU, where it is nearly free: the confidence threshold is
    tuned rather than fixed.
    """

    def __init__(
        self, tuner: Tuner, bar_tokens_per_s: float, limit: int, chunk: int | None = None
    ) -> None:
        """`chunk`: the request's greedy exact width (`Tuner.batch_cost`)."""
        self.tuner = tuner
        self.bar = bar_tokens_per_s
        self.limit = limit
        self.chunk = chunk
        self.survive = 1.0  # probability that every token kept so far is accepted
        self._later = tuner.acceptance.rates(DRAFT, limit)
        self._draft_s = tuner.draft_token_cost()

    def __call__(self, position: int, confidence: float) -> bool:
        if position >= self.limit:
            return False
        rate = self.tuner.acceptance.rates(confidence_key(confidence), 1)[0]
        base = self.tuner.batch_cost(position + 1, self.chunk)
        gain, survive = 0.0, self.survive * rate
        for extra in range(1, self.limit - position + 1):
            gain += survive
            extended = self.tuner.batch_cost(position + 1 + extra, self.chunk)
            cost = extra * self._draft_s + extended - base
            if cost <= 0 or gain / cost > self.bar:
                self.survive *= rate
                return True
            if position + extra < self.limit:
                survive *= self._later[position + extra]
        return False


class Tuner:
    """Chooses (proposer, k) per step from a hardware profile and an acceptance model."""

    def __init__(
        self,
        profile: HardwareProfile,
        acceptance: AcceptanceModel | None = None,
        *,
        k_max: int = 8,
        explore: float = 0.05,
        explore_ngram: bool = True,
        seed: int = 0,
    ) -> None:
        self.profile = profile
        self.acceptance = acceptance or AcceptanceModel()
        self.k_max = k_max
        self.explore = explore
        # False when n-gram acceptance is learned from lookups scored without drafting them
        # (AutoDrafter's shadow observations): exploring the n-gram would only cost time
        self.explore_ngram = explore_ngram
        self._rng = np.random.default_rng(seed)
        # an option that loses even when every draft token is accepted is not worth exploring
        self._draft_may_pay = profile.draft_can_ever_pay(k_max)
        # measured / calibrated verification time, per batch size and over all sizes
        self.costs = LiveCosts(catchup_s=self.calibrated_catchup_s)
        self.payoff = Payoff()

    @property
    def calibrated_catchup_s(self) -> float:
        """The calibration's seconds per token the draft catches up on."""
        return (self.profile.draft_s or 0.0) * self.profile.catchup_per_token

    def verify_cost(self, batch: int) -> float:
        """Seconds to verify `batch` tokens: the calibration, corrected by measurements."""
        return self.profile.verify(batch) * self.costs.ratio(batch)

    def batch_cost(self, batch: int, chunk: int | None = None) -> float:
        """Seconds to verify `batch` tokens to the end: one batch, or where the request's
        greedy verification decodes exact-width chunks (`chunk`: at most this many tokens a
        decode, `localspec.speculative.ties`), every chunk. The early stop prices a longer
        draft with it: on a CPU whose exact width is 3, a third draft token costs a whole
        one-token decode more, not the few percent a wider batch would.

        The width is an argument, not the tuner's: one tuner serves every request of a route,
        and a greedy request that pre-empts a sampled one must not leave its width behind."""
        return chunked_cost(self.verify_cost, batch, chunk)

    def draft_cost(self, k: int) -> float:
        """Seconds for the draft model to propose k tokens, including its catching up."""
        return k * self.draft_token_cost() + self.costs.draft_overhead_s

    def draft_token_cost(self) -> float:
        """Seconds per draft token: the calibration, scaled by the target's measured ratio.
        Both models share the machine, so a load that slows the target slows the draft
        alike; unscaled, a loaded machine's draft looked cheap beside its verification."""
        return (self.profile.draft_s or 0.0) * self.costs.overall_ratio

    def empty_draft_rate(self) -> float:
        """How often a chosen draft-model draft ends before its first token (tuned stop)."""
        return self.costs.empty_rate

    def expected_verify_cost(
        self, k: int, rates: Sequence[float], chunk: int | None = None
    ) -> float:
        """Expected seconds to verify a draft of k tokens whose positions are accepted at
        `rates`: one batch of k + 1, or, where verification decodes exact-width chunks
        (`chunk`, as in `batch_cost`), each chunk weighted by the chance the draft survives
        to it."""
        width = chunk
        if width is None or k + 1 <= width:
            return self.verify_cost(k + 1)
        cost, survive = 0.0, 1.0
        for start in range(0, k + 1, width):
            if start:
                survive *= math.prod(rates[start - width : start])
            cost += survive * self.verify_cost(min(width, k + 1 - start))
        return cost

    def _best_k(self, key: str, limit: int, drafting: bool, chunk: int | None) -> tuple[int, float]:
        """The draft length (at least 1) with the most expected tokens per second, and that
        speed, which may be below plain decoding's: the option is then not chosen. (Offered
        at plain decoding's speed instead, a draft no length of which pays was chosen as
        soon as its measured payoff rose above 1.)

        A draft-model step is empty with probability p0 (its stop cut at once): then it yields
        one token for a one-token verification plus the draft's catching up. Otherwise it
        yields the usual expectation for the usual cost, so the speed is the ratio of the two
        mixtures rather than a ratio that would charge empty steps a full batch.
        """
        rates = self.acceptance.rates(key, limit)
        plain_cost = self.verify_cost(1)
        best_k, best = 1, 0.0
        p0 = self.empty_draft_rate() if drafting else 0.0
        empty_cost = plain_cost + self.draft_cost(0) if drafting else plain_cost
        for k in range(1, limit + 1):
            tokens = expected_tokens(rates[:k])
            verify = self.expected_verify_cost(k, rates, chunk)
            cost = verify + (self.draft_cost(k) if drafting else 0.0)
            if p0 > 0:
                tokens, cost = (1 - p0) * tokens + p0, (1 - p0) * cost + p0 * empty_cost
            speed = tokens / cost
            if speed > best:
                best_k, best = k, speed
        return best_k, best

    def _choice(self, proposer: str, k: int, key: str, speed: float) -> Choice:
        """An option at the speed its models predict, corrected by its source's measured
        payoff (`payoff_source`)."""
        corrected = speed * self.payoff.factor(payoff_source(proposer, key))
        return Choice(proposer, k, key, corrected, modelled_tokens_per_s=speed)

    def catchup_cost(self, behind: int) -> float:
        """Seconds for the draft to process `behind` tokens beyond its steady one or two."""
        return max(behind - STEADY_BEHIND, 0) * self.costs.catchup_s

    def options_for(
        self,
        lookups: Sequence[tuple[str, int]],
        draft_allowed: bool,
        draft_behind: int = 0,
        remaining: int | None = None,
        *,
        draft_loaded: bool = True,
        chunk: int | None = None,
    ) -> list[Choice]:
        """Plain decoding, the best draft length of each n-gram lookup (its key and how many
        tokens it offers), and the draft model's.

        The draft model is offered only when what it is expected to save over the rest of
        the generation (`remaining` tokens, at most DEFAULT_HORIZON) exceeds the one-off cost
        of catching up on the `draft_behind` tokens it has not seen, and of loading it when
        it is not `draft_loaded` (the last load as measured). On a CPU, where a 0.5B draft
        processes a prompt at ~100 tokens/s, returning to the draft after a few hundred
        tokens costs seconds; on a GPU it costs almost nothing. Not offered also means not
        explored. Where the request verifies one token at a time (`chunk` 1), only plain
        decoding is offered.
        """
        plain = self._choice(NONE, 0, NONE, 1.0 / self.verify_cost(1))
        found = [plain]
        if chunk == 1:
            # verified a token at a time, a drafted token costs the one-token decode plain
            # decoding would make for it: a draft can at best tie, and its lookups, catch-up
            # and bookkeeping are extra (a source whose payoff measured above its model
            # would otherwise be chosen for nothing)
            return found
        for key, available in lookups:
            if available > 0:
                k, speed = self._best_k(key, min(available, self.k_max), False, chunk)
                found.append(self._choice(NGRAM, k, key, speed))
        if draft_allowed and self._draft_may_pay and self.profile.draft_s is not None:
            k, speed = self._best_k(DRAFT, self.k_max, True, chunk)
            switch = self.catchup_cost(draft_behind)
            switch += 0.0 if draft_loaded else self.costs.draft_load_s
            draft = replace(
                self._choice(DRAFT, k, DRAFT, speed), draft_behind=draft_behind, switch_s=switch
            )
            left = DEFAULT_HORIZON if remaining is None else min(remaining, DEFAULT_HORIZON)
            saved = left / plain.predicted_tokens_per_s - left / draft.predicted_tokens_per_s
            if switch == 0 or saved > switch:
                found.append(draft)
        return found

    def choose(
        self,
        lookups: Sequence[tuple[str, int]],
        draft_allowed: bool,
        draft_behind: int = 0,
        remaining: int | None = None,
        budget: ExplorationBudget | None = None,
        *,
        draft_loaded: bool = True,
        chunk: int | None = None,
    ) -> Choice:
        """The option with the best expected speed, or now and then another one to explore,
        given this step's n-gram lookups (each source's key and how many tokens it offers;
        see `options_for`). An exploration is made only where its expected loss fits the
        request's `budget` (None: no limit). `chunk` is the request's greedy exact width
        (`batch_cost`)."""
        found = self.options_for(
            lookups, draft_allowed, draft_behind, remaining, draft_loaded=draft_loaded, chunk=chunk
        )
        best = max(found, key=lambda c: c.predicted_tokens_per_s)
        for other in found:
            if other.proposer in (best.proposer, NONE):
                continue
            if other.proposer == NGRAM and not self.explore_ngram:
                continue
            # options barely observed are tried more often: their estimate is mostly prior
            chance = self.explore if self.acceptance.observations(other.key) >= 5 else 0.25
            if self._rng.random() < chance and (
                budget is None or budget.spend(self.exploration_loss(other, best))
            ):
                return replace(other, explored=True)
        return best

    def exploration_budget(self, remaining: int) -> ExplorationBudget:
        """A request's exploration budget, for `remaining` tokens to generate."""
        return ExplorationBudget(
            EXPLORE_SHARE * min(remaining, DEFAULT_HORIZON) * self.verify_cost(1)
        )

    def exploration_loss(self, option: Choice, best: Choice) -> float:
        """Seconds a step of `option` is expected to lose against `best`: its expected tokens
        at its expected speed rather than the best's, and switching to the draft model."""
        tokens = expected_tokens(self.acceptance.rates(option.key, max(option.k, 1)))
        slower = tokens / option.predicted_tokens_per_s - tokens / best.predicted_tokens_per_s
        return max(slower, 0.0) + option.switch_s

    def draft_stop(
        self, choice: Choice, limit: int, chunk: int | None = None
    ) -> Callable[[int, float], bool]:
        """The early stop for a draft-model draft of at most `limit` tokens (see DraftStop).

        An explored choice drafts its k tokens unstopped: exploring is for measuring the
        draft as chosen, and a stop that judged it by the estimates being tested would cut
        it before it yields any observation.
        """
        if choice.explored:
            k = min(choice.k, limit)
            return lambda position, _confidence: position < k
        plain = 1.0 / self.verify_cost(1)
        bar = max(choice.modelled_tokens_per_s, plain)
        return DraftStop(self, bar, min(limit, self.k_max), chunk)

    def observe_step(self, choice: Choice, tokens: int) -> None:
        """A step of `choice` produced `tokens` (see `Payoff`), against what the acceptance
        model expects of the length actually drafted (a draft-model draft's stop may run
        past the chosen k). Call it before `observe` teaches the model the same step."""
        if choice.proposer == NONE or choice.k <= 0:
            return
        expected = expected_tokens(self.acceptance.rates(choice.key, choice.k))
        self.payoff.observe(payoff_source(choice.proposer, choice.key), tokens, expected)

    def observe(
        self, choice: Choice, drafted: int, accepted: int, confidence: Sequence[float] = ()
    ) -> None:
        """Fold one verified draft into the acceptance model. `confidence`, the draft model's
        probability of each drafted token, also teaches the early stop: every token that was
        verified with all before it accepted counts for its confidence band.

        A draft-model choice the stop ended before its first token yielded nothing but cost
        the draft its catching up; how often that happens is kept apart (`empty_draft_rate`)
        so the choice's expected speed weighs it in.
        """
        if choice.proposer == DRAFT and not choice.explored:
            self.costs.observe_empty(drafted == 0)
        if choice.proposer != NONE and drafted > 0:
            self.acceptance.update(choice.key, drafted, accepted)
        for position, probability in enumerate(confidence[: min(drafted, accepted + 1)]):
            self.acceptance.update(confidence_key(probability), 1, int(position < accepted))

    def observe_costs(
        self,
        choice: Choice,
        drafted: int,
        draft_seconds: float,
        verify_seconds: float,
        decoded: Sequence[int] = (),
    ) -> None:
        """Fold one step's measured times into the cost model (see the module docstring).

        `decoded` are the sizes of the decodes the verification made (default: one batch of
        drafted + 1); the measured time corrects the calibrated cost of each of those sizes."""
        sizes = tuple(decoded) or (drafted + 1,)
        calibrated = sum(self.profile.verify(size) for size in sizes)
        self.costs.observe_verify(sizes, verify_seconds, calibrated)
        if choice.proposer == DRAFT and self.profile.draft_s is not None:
            extra = max(draft_seconds - drafted * self.draft_token_cost(), 0.0)
            caught_up = choice.draft_behind - STEADY_BEHIND
            if caught_up > 4:  # a real catch-up: learn its cost per token
                per_token = max(extra - self.costs.draft_overhead_s, 0.0) / caught_up
                self.costs.observe_catchup(per_token)
            else:  # a step in continuous use: learn the steady overhead
                self.costs.observe_draft_overhead(extra)
