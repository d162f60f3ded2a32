"""The speculative step's acceptance rule, on plain arrays (no model, no I/O).

Given the draft and a way to get the target's distribution at each draft position, decide
which draft tokens the target accepts and which token it emits after them:

* greedy: accept while the draft token is the target's argmax; emit the argmax where they
  differ (or the bonus argmax after a fully accepted draft). Output equals plain greedy decoding.
* sampling, deterministic draft (n-gram): sample x ~ p_target and accept while x equals the
  draft token; the sampled x is the emitted token where they differ. Every emitted token is a
  draw from p_target, consuming the random stream exactly as plain decoding would.
* sampling, draft model with q_draft: accept token x with probability min(1, p(x)/q(x)); on
  rejection emit a draw from the normalised residual max(0, p - q) (Leviathan et al., 2023).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from localspec.speculative.proposer import Draft
from localspec.speculative.sampling import draw

Probs = npt.NDArray[np.float64]


# target_at(i) -> the target's choice at draft position i: an int for greedy decoding, else
# the probability vector. Called lazily, in order, so rows after a rejection are never processed.
TargetAt = Callable[[int], "int | Probs"]


@dataclass(frozen=True)
class Verdict:
    """What one verification decided: `tokens` = accepted draft prefix + one target token."""

    drafted: int
    accepted: int
    tokens: list[int]

    @property
    def bonus(self) -> bool:
        """True when the whole draft was accepted (the last token is the free extra one)."""
        return self.accepted == self.drafted > 0


def verify_draft(draft: Draft, target_at: TargetAt, rng: np.random.Generator) -> Verdict:
    """Apply the acceptance rule that keeps the output distributed as the target's own."""
    out: list[int] = []
    for i, x in enumerate(draft.tokens):
        p_target = target_at(i)
        if isinstance(p_target, int):
            if p_target != x:
                return Verdict(len(draft), i, [*out, p_target])
        elif draft.q_draft is None:
            y = draw(p_target, rng)
            if y != x:
                return Verdict(len(draft), i, [*out, y])
        else:
            q_draft = draft.q_draft[i]
            if rng.random() * q_draft[x] >= p_target[x]:  # reject with prob 1 - min(1, p/q)
                residual = np.maximum(p_target - q_draft, 0.0)
                total = residual.sum()
                # total == 0 only if p == q, in which case rejection has probability 0
                return Verdict(
                    len(draft), i, [*out, draw(residual / total if total > 0 else p_target, rng)]
                )
        out.append(x)
    last = target_at(len(draft.tokens))
    out.append(last if isinstance(last, int) else draw(last, rng))
    return Verdict(len(draft), len(draft), out)
