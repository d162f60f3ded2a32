"""What each option's steps really yield per second, against what the tuner predicted for them.

The tuner predicts an option's speed from two models: acceptance per n-gram match band or
draft confidence, and verification costs per batch size. Both can be wrong in ways the
models cannot see from inside: acceptance learned on one kind of text (edits that copy
their input, where long matches are right 95% of the time) is too hopeful on another (JSON,
where a long match is followed by a value only half the time), and a step costs more than
its verification decode (the draft's per-step work, contention on a shared machine). At a
break-even acceptance those errors decide: verifying 2 tokens costs ~1.6x one on a 2-core
CPU, so a one-token draft needs more than 60% acceptance, and a belief of 70% against a
truth of 50% makes every such draft a loss.

`Payoff` measures the error where it matters, on the steps the tuner took: for each proposer
(and for plain decoding) the tokens its steps produced and the wall seconds they took, beside
the tokens and seconds predicted for them, all decayed so a change of text is followed within
a few dozen steps. The ratio of realized to predicted speed corrects that proposer's
predictions, so the acceptance a draft needs to be chosen is the break-even the measured
costs and measured yield imply, not the one the models assume.
"""

from __future__ import annotations

from dataclasses import dataclass

# weight of the predictions before any step is measured, in steps: a handful of measured
# steps outweigh them, a single unlucky one does not
PRIOR_STEPS = 6.0
# memory of the measurements: a step's weight halves after ~35 later steps of the option
DECAY = 0.98


@dataclass
class _Totals:
    """Decayed sums over one option's measured steps of realized / predicted tokens and of
    realized / predicted seconds, both unitless, started from PRIOR_STEPS steps that went
    exactly as predicted (a factor of 1)."""

    yield_ratio: float = PRIOR_STEPS
    time_ratio: float = PRIOR_STEPS

    def add(self, tokens: float, seconds: float, expected_tokens: float, expected_s: float) -> None:
        self.yield_ratio = self.yield_ratio * DECAY + tokens / expected_tokens
        self.time_ratio = self.time_ratio * DECAY + seconds / expected_s

    @property
    def factor(self) -> float:
        """Realized speed over predicted: more tokens than expected raise it, more time
        than expected lowers it."""
        return self.yield_ratio / self.time_ratio


class Payoff:
    """Realized over predicted speed per proposer ("none", "ngram", "draft")."""

    def __init__(self) -> None:
        self._totals: dict[str, _Totals] = {}

    def factor(self, proposer: str) -> float:
        """What this proposer's predicted speeds are multiplied by (1.0 before any data)."""
        totals = self._totals.get(proposer)
        return totals.factor if totals is not None else 1.0

    def observe(
        self,
        proposer: str,
        tokens: int,
        seconds: float,
        expected_tokens: float,
        expected_seconds: float,
    ) -> None:
        """One step of `proposer`: `tokens` produced in `seconds` of wall time, where the
        tuner expected `expected_tokens` in `expected_seconds`. Steps without a timing or
        a prediction (a replay, an empty draft) teach nothing."""
        if seconds <= 0.0 or expected_seconds <= 0.0 or expected_tokens <= 0.0:
            return
        self._totals.setdefault(proposer, _Totals()).add(
            tokens, seconds, expected_tokens, expected_seconds
        )
