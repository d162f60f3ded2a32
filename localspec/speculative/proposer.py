"""The one small protocol every drafting strategy implements, and the draft it returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from localspec.speculative.protocols import Logits
from localspec.speculative.sampling import Sampler


@dataclass(frozen=True)
class Draft:
    """Tokens proposed to follow the context, and how they were chosen.

    `q_draft[i]` is the probability vector token `tokens[i]` was sampled from when the proposer
    is a model sampling at temperature > 0; the min(1, p/q) rule needs it. Deterministic
    proposers (n-gram lookups, greedy drafting) leave it `None` and are verified by
    sample-and-compare, which is exact for any deterministic proposal. `confidence[i]` is the
    probability a model proposer gave `tokens[i]`; the tuner learns acceptance per band of it.
    `cut` counts proposed tokens dropped because the request's constraint forbids them.
    """

    tokens: list[int]
    source: str
    q_draft: list[npt.NDArray[np.float64]] | None = None
    seconds: float = field(default=0.0, compare=False)
    confidence: tuple[float, ...] = field(default=(), compare=False)
    cut: int = field(default=0, compare=False)

    def __len__(self) -> int:
        return len(self.tokens)


class DraftConstraint(Protocol):
    """The request's constraint as proposers see it (`localspec.constraints.guide.Guide`)."""

    def validate(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the constraint allows after the emitted tokens."""
        ...

    def constrain(self, logits: Logits, prefix: Sequence[int]) -> Logits:
        """`logits` for the position after `prefix` with forbidden tokens at -inf."""
        ...

    def forced(self) -> list[int]:
        """The tokens the constraint forces next (a key of a schema's object), if any."""
        ...


@dataclass(frozen=True)
class DraftLimits:
    """How much to draft this step; the engine (later the tuner) decides, proposers obey.

    `p_min`: a model proposer stops where its distribution's top probability is below this
    (under sampling, decided before the draw: a stop that depended on the drawn token would
    bias the min(1, p/q) rule).
    `min_match`: a lookup proposer drafts only from a suffix match at least this long, since
    short matches predict poorly and a rejected draft still costs a wider verification batch.
    `keep_drafting(position, confidence)`: asked by a model proposer before it keeps the token
    at `position` (0-based) that it gives probability `confidence`; False ends the draft there.
    It is how the tuner's early stop reaches the proposer without the proposer knowing costs.
    `suffix`: a lookup proposer may draft from suffix drafts (`localspec.speculative.suffix`):
    the request's `SpecSettings.suffix_drafts`.
    `constraint`: a lookup proposer cuts its draft at the first token it forbids; a model
    proposer drafts from its masked logits, so its q_draft is the masked q the min(1, p/q)
    rule must see to stay exact.
    """

    max_len: int
    p_min: float = 0.0
    min_match: int = 1
    keep_drafting: Callable[[int, float], bool] | None = None
    constraint: DraftConstraint | None = None
    suffix: bool = False


class Proposer(Protocol):
    """Proposes continuations of a token sequence that only grows during one generation."""

    name: str

    def reset(self, prompt: Sequence[int]) -> None:
        """A new generation starts from `prompt`; later calls only see it grow by appending."""

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        """Up to `limits.max_len` tokens to follow `tokens` (empty: nothing worth drafting)."""

    def finish(self, tokens: Sequence[int]) -> None:
        """The generation ended with `tokens` (prompt + output); learn from it if useful."""
