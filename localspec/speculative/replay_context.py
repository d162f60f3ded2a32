"""A target that replays a recorded greedy answer, on a virtual clock: what lets the what-if
replay (`localspec.speculative.simulate`) run the engine's own step without a model.

Under greedy decoding the target's logits matter only through their argmax, and the argmax
after a prefix of the recorded sequence is the recorded next token. So every row this
context returns is one-hot (`DECISIVE`): at the recorded token while its cache holds a
prefix of the recorded prompt and answer, and at token 0 once it holds anything else
(verification stops at the first rejected token, so that row is never the one that
decides). Each decode costs what the hardware profile says a batch of its size costs, on a
clock the engine measures its verification with (`Engine(now=...)`): under a tie guard
(`localspec.speculative.simulate.replay_guard`) each exact-width chunk is a decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.speculative.protocols import Logits, WhichLogits
from localspec.speculative.shadows import matching_prefix
from localspec.speculative.tuner import HardwareProfile

_WRONG = 0  # the argmax after a sequence that left the recording
# a row's top logit: far beyond the rest, so a replayed choice never hinges on rounding
DECISIVE = 1e6
_DRAFT_ROOM = 65  # the longest draft (64) and its pending token fit past the recording


class _NoTimings:
    """A replay spends no time in llama.cpp."""

    decode_ns = 0
    logits_ns = 0


@dataclass(frozen=True)
class PrefixReused:
    """What a replay's prefill reused (a `PrefillRecord`): the common prefix alone, as a
    replay neither shifts chunks nor keeps saved states."""

    reused: int
    shifted: int = 0
    restored: int = 0


class ReplayVocabulary:
    """Tokens without text, ending at the replayed answer's end token (if it has one)."""

    def __init__(self, end_token: int | None) -> None:
        self.end_token = end_token

    def piece(self, token: int) -> bytes:
        return b""

    def is_end_of_generation(self, token: int) -> bool:
        return token == self.end_token


class ReplayContext:
    """A `ModelContext` over `prompt + output` whose decodes cost `profile`'s seconds.

    An answer that ended by itself (`ends`) is followed by an end token, one id past every
    recorded one (`end_token`), so that a draft may run past the answer's end as it would
    live, paying for its whole batch; one cut at max_tokens is not."""

    def __init__(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        profile: HardwareProfile,
        *,
        ends: bool = True,
    ) -> None:
        recorded = [*prompt, *output]
        self.end_token = max(recorded, default=0) + 1 if ends else None
        self.sequence = recorded if self.end_token is None else [*recorded, self.end_token]
        self.profile = profile
        self.n_vocab = max(self.sequence, default=0) + 1
        self.seconds = 0.0  # the virtual clock
        self.timings = _NoTimings()
        self._tokens: list[int] = []
        self._agreeing = 0  # how many leading cached tokens are the recording's

    def now(self) -> float:
        return self.seconds

    @property
    def n_ctx(self) -> int:
        return len(self.sequence) + _DRAFT_ROOM

    @property
    def n_past(self) -> int:
        return len(self._tokens)

    def common_prefix(self, tokens: Sequence[int]) -> int:
        return matching_prefix(self._tokens, tokens)

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> PrefixReused:
        """Hold `tokens` at no cost: a replay compares answers, not prompt processing."""
        reused = self.common_prefix(tokens)
        self.truncate(reused)
        self._append(tokens[reused:])
        return PrefixReused(reused)

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[PrefixReused, Logits | None]:
        """`prefill`, charging the last token's decode as one plain step: the row the first
        output token is chosen from is part of its generation's time. A replay runs alone:
        neither a deadline nor `interrupt` stops it."""
        prefilled = self.prefill(tokens[:-1])
        return prefilled, self.sync(tokens)

    def sync(self, tokens: Sequence[int]) -> Logits:
        self.prefill(tokens[:-1])
        row: Logits = self.decode(tokens[-1:], logits="last")[0]
        return row

    def decode(self, tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        start = len(self._tokens)
        self._append(tokens)
        self.seconds += self.profile.verify(len(tokens))
        # a row follows the first `length` cached tokens
        end = len(self._tokens)
        positions = {"none": [], "last": [end], "all": list(range(start + 1, end + 1))}[logits]
        rows: Logits = np.zeros((len(positions), self.n_vocab), dtype=np.float32)
        for row, length in zip(rows, positions, strict=True):
            row[self._next_token(length)] = DECISIVE
        return rows

    def truncate(self, length: int) -> None:
        del self._tokens[length:]
        self._agreeing = min(self._agreeing, length)

    def _append(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            at = len(self._tokens)
            if self._agreeing == at < len(self.sequence) and self.sequence[at] == token:
                self._agreeing += 1
            self._tokens.append(token)

    def _next_token(self, length: int) -> int:
        """The recorded token after the first `length` cached tokens, if they are recorded."""
        if self._agreeing >= length and length < len(self.sequence):
            return self.sequence[length]
        return _WRONG
