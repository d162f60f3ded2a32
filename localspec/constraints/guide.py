"""One generation's constraint: the token mask at each position, kept exact under speculation.

The matcher's state follows the tokens the engine has emitted, plus `pending` tokens a draft
is being judged with. Every operation names the position it is about by the draft tokens
before it (`prefix`), and the guide moves the matcher there itself, consuming or rolling
back as needed: drafting and verification ask for the same positions in the same order, so
a mask the draft model computed is the one verification reuses, and the rollback of
rejected tokens happens in one place (`_rewind`).

Masks are boolean arrays over the vocabulary; `constrain` applies one to a logits row
(forbidden tokens -> -inf) before any sampling rule sees it.

Once the matcher stops (the output is complete), only end tokens may follow. llguidance
counts none of those in its rollback history, so the guide keeps them as pending tokens the
matcher never consumed (`_real` counts the ones it did): a draft that runs past the end
(the draft model drafting an end token, then another) is judged and rolled back like any.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from llguidance import LLMatcher

from localspec.errors import ConstraintError

Allowed = npt.NDArray[np.bool_]
Logits = npt.NDArray[np.float32]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Guide:
    """A constraint's matcher for one generation, with the seconds and masks it cost."""

    def __init__(
        self, matcher: LLMatcher, n_vocab: int, kind: str, end_tokens: Sequence[int]
    ) -> None:
        self.kind = kind
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._ends = frozenset(end_tokens)
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._pending: list[int] = []
        self._real = 0  # leading pending tokens the matcher consumed (the rest: ends after a stop)
        self._masks: dict[int, Allowed] = {}  # position (into pending) -> its mask
        self.seconds = 0.0  # computing masks, consuming, validating, rolling back
        self.masks = 0

    # -- what the engine asks -------------------------------------------------------------
    def allowed(self, prefix: Sequence[int]) -> Allowed:
        """The tokens the constraint allows after the emitted tokens and `prefix`."""
        started = time.perf_counter()
        depth = len(prefix)
        mask = self._masks.get(depth)
        if mask is None or _common_prefix(self._pending, prefix) < depth:
            self._reach(prefix)
            self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            if self._matcher.is_error():
                # llguidance's mask is then its end tokens alone: taken as is, the answer
                # would just stop, looking finished (a lexer limit it met at this token)
                raise ConstraintError(
                    self.kind, f"the constraint library gave up on it: {self._error()}"
                )
            bits = np.unpackbits(self._bits.view(np.uint8), count=self._n_vocab, bitorder="little")
            mask = bits.view(np.bool_)
            self._masks[depth] = mask
            self.masks += 1
        self.seconds += time.perf_counter() - started
        return mask

    def constrain(self, logits: Logits, prefix: Sequence[int]) -> Logits:
        """`logits` with every token the constraint forbids after `prefix` set to -inf."""
        allowed = self.allowed(prefix)
        started = time.perf_counter()
        masked: Logits = np.where(allowed, logits, np.float32(-np.inf))
        self.seconds += time.perf_counter() - started
        return masked

    def validate(self, tokens: Sequence[int]) -> int:
        """How many leading `tokens` the constraint allows right after the emitted tokens."""
        started = time.perf_counter()
        common = _common_prefix(self._pending, tokens)
        self._rewind(common)
        valid = common + self._matcher.validate_tokens(list(tokens[common:]))
        self.seconds += time.perf_counter() - started
        return valid

    def forced(self) -> list[int]:
        """The tokens the constraint forces right after the emitted ones (llguidance's
        fast-forward tokens: a JSON key the schema fixes), as a draft worth verifying."""
        started = time.perf_counter()
        self._rewind(0)
        tokens = list(self._matcher.compute_ff_tokens())
        self.seconds += time.perf_counter() - started
        return tokens

    def commit(self, emitted: Sequence[int]) -> None:
        """The engine emitted `emitted` this step: they become the matcher's base state."""
        started = time.perf_counter()
        self._reach(emitted)
        self._pending, self._real = [], 0
        self._masks = {}
        self.seconds += time.perf_counter() - started

    @property
    def stopped(self) -> bool:
        """True once nothing but an end-of-generation token may follow (after `commit`)."""
        return bool(self._matcher.is_stopped())

    @property
    def accepting(self) -> bool:
        """True when the output so far satisfies the constraint (after `commit`)."""
        return bool(self._matcher.is_accepting())

    # -- moving the matcher -----------------------------------------------------------------
    def _reach(self, prefix: Sequence[int]) -> None:
        """Put the matcher exactly after the emitted tokens + `prefix`."""
        common = _common_prefix(self._pending, prefix)
        self._rewind(common)
        for token in prefix[common:]:
            if self._real == len(self._pending) and not self._matcher.is_stopped():
                # the engine only ever passes tokens a mask allowed, or a validated draft:
                # a refusal is one of llguidance's limits (`a{1000000}`), the client's to fix
                if not self._matcher.consume_token(token):
                    raise ConstraintError(
                        self.kind, f"the constraint library gave up on it: {self._error()}"
                    )
                self._real += 1
            elif token not in self._ends:
                raise RuntimeError(f"token {token} follows the constraint's end")
            self._pending.append(token)

    def _rewind(self, depth: int) -> None:
        """Roll back pending tokens beyond `depth`: the one place tokens are undone."""
        if len(self._pending) <= depth:
            return
        extra = self._real - min(self._real, depth)
        if extra and not self._matcher.rollback(extra):
            raise RuntimeError(f"the constraint could not roll back {extra}: {self._error()}")
        self._real -= extra
        del self._pending[depth:]
        self._masks = {d: m for d, m in self._masks.items() if d <= depth}

    def _error(self) -> str:
        return str(self._matcher.get_error()) or "no reason given"
