"""What each proposer's drafts really yield, against what the acceptance model promised.

The tuner predicts an option's speed from acceptance per n-gram match band or draft
confidence, learned over every generation of a route. Learned on one kind of text it is too
hopeful on another: edits that copy their input teach that a long match is right 95% of the
time, and on JSON a long match is followed by a value about half the time. At a break-even
acceptance that decides: verifying 2 tokens costs 1.5-1.6x one on a 2-core CPU, so a
one-token draft needs more than 52-62% acceptance, and a belief of 90% against a truth of
50% makes every such draft a loss, for as long as the long memory of the model takes to
forget (a hundred lookups of that band).

`Payoff` measures the promise where it matters, on the drafts the tuner chose: per source
(the draft model, each n-gram source: `localspec.speculative.tuner.payoff_source`), the
tokens its steps produced beside the tokens the acceptance model expected of them, both
decayed so a change of text is followed within a few dozen drafts. The ratio multiplies that
source's predicted speeds, so the acceptance a draft needs to be chosen is the break-even
the measured costs imply, judged against the acceptance it is measured to have. Costs need
no such correction: the tuner measures them on every step (`Tuner.observe_costs`).

The factor only ever lowers a promise (it is at most 1). Drafts that yield more than
expected already teach the acceptance model their higher rates; a factor above 1 counted
them twice, and one lucky draft did the most: in an editor's FIM session one fully accepted
8-token draft from the cache of earlier answers (9 tokens where ~3 were expected) lifted
that source 1.4x, and the four drafts it then chose were each rejected at once. For the
same reason one draft counts for at most MAX_RATIO: capped only at the end, the lucky draft
still outweighed the next few losses.
"""

from __future__ import annotations

from dataclasses import dataclass

# weight of the acceptance model's promise before any draft is measured, in drafts: a
# handful of measured drafts outweigh it, a single unlucky one does not
PRIOR_STEPS = 6.0
# memory of the measurements: a draft's weight halves after ~35 later drafts of its proposer
DECAY = 0.98
# the most one draft's produced/expected counts for (a one-token draft is at most 1.05 here)
MAX_RATIO = 1.5


@dataclass
class _Yield:
    """Decayed sums of produced and expected tokens over one proposer's drafts, started
    from PRIOR_STEPS drafts that went exactly as expected (a factor of 1)."""

    produced: float = PRIOR_STEPS
    expected: float = PRIOR_STEPS

    def add(self, tokens: float, expected_tokens: float) -> None:
        # each draft counts as its ratio, so one long draft does not outweigh many short ones,
        # and as at most MAX_RATIO, so one lucky draft does not hide the losses after it
        ratio = min(tokens / expected_tokens, MAX_RATIO)
        self.produced = self.produced * DECAY + ratio
        self.expected = self.expected * DECAY + 1.0

    @property
    def factor(self) -> float:
        return min(self.produced / self.expected, 1.0)


class Payoff:
    """Produced over expected tokens per drafting source ("draft", "ngram", "ngram/suffix",
    ...)."""

    def __init__(self) -> None:
        self._yields: dict[str, _Yield] = {}

    def factor(self, source: str) -> float:
        """What this source's predicted speeds are multiplied by (1.0 before any data,
        and always for plain decoding, whose one token a step is certain)."""
        measured = self._yields.get(source)
        return measured.factor if measured is not None else 1.0

    def observe(self, source: str, tokens: int, expected_tokens: float) -> None:
        """One draft from `source` produced `tokens` (accepted + the target's own) where the
        acceptance model expected `expected_tokens`."""
        if expected_tokens > 0.0:
            self._yields.setdefault(source, _Yield()).add(tokens, expected_tokens)
