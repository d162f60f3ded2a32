"""How prompt processing splits a prompt into llama_decode calls, and stops one midway.

A server's worker stops a prompt for an editor's request between two calls, or during one:
llama.cpp's CPU backend asks an abort callback between the operations of its graph
(`abortable`), and a call stopped so keeps nothing (llama.cpp drops its cells:
`DecodeAbortedError`) and is decoded again whole when the prompt goes on. On a CPU a 512-token
call of the 1.5B target takes 5-15 s (35-100 prompt tokens/s): pieces of `CPU_PIECE` tokens
bound the work a stop throws away to ~1.3-3.7 s, and, where no callback is asked (a GPU's
graph), the wait. They cost ~2% of prompt speed, measured here (1,024 tokens, 4 interleaved
rounds: 98.3 tok/s in 512-token calls, 96.5 in 128, 89.5 in 64). On a GPU a 512-token batch
takes tens of milliseconds and smaller ones waste most of it: there pieces are the whole batch.

The pieces depend only on how many tokens are left, never on whether anything interrupted: a
prefill stopped after a piece or within one and resumed decodes the same calls as one that was
never stopped, so an interrupted answer is the same answer. However often editors ask, the
prompt moves on: `PromptHold` stops it only until it has gone `hold_s` seconds without
finishing a call, and then lets the call under way run to its end. A short tail joins the
piece before it: a call of fewer than ~64 tokens takes other CPU kernels. On this CPU 128-token
pieces gave the same logits, bit for bit, as 512-token calls wherever those ended in a call of
64 tokens or more (prompts of 900 and 1,100 tokens); where they ended in a short one (530 = 512
+ 18) the two round that tail differently, as a warm and a cold cache already do.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import llama_cpp.llama_cpp as lc

from localspec.errors import DecodeError

_log = logging.getLogger(__name__)

LLAMA_ABORTED = 2
"""What llama_decode returns when its abort callback stopped it."""


class DecodeAbortedError(DecodeError):
    """A decode stopped midway because the abort callback asked: the cache holds none of it."""


CPU_PIECE = 128
"""Prompt tokens per llama_decode call where the target runs on the CPU (`--ubatch-size`)."""

MIN_PIECE = 16
"""The smallest `--ubatch-size`: below it each call's overhead dominates."""

MAX_PIECE = 512
"""The largest `--ubatch-size`: the batch localspec's contexts are made with."""


def next_piece(left: int, piece: int, n_batch: int) -> int:
    """How many of the `left` prompt tokens the next call decodes: `piece`, or all of them
    where what would remain is under half a piece and the whole fits one batch."""
    if left <= piece or (left - piece < piece // 2 and left <= n_batch):
        return left
    return piece


@contextlib.contextmanager
def abortable(handle: Any, interrupt: Callable[[], bool] | None) -> Iterator[None]:
    """Within, every decode on the llama context `handle` asks `interrupt` between the
    operations of its graph (on the CPU: thousands a call, each a Python call of about a
    microsecond) and stops when it says so (`DecodeAbortedError`); None: nothing is asked."""
    if interrupt is None:
        yield
        return

    def asked(_data: Any) -> bool:
        try:
            return bool(interrupt())
        except Exception:  # raised into C it would be lost: go on, and say why
            _log.exception("the prompt's interrupt check failed; the decode goes on")
            return False

    callback = lc.ggml_abort_callback(asked)  # referenced until it is taken off again
    lc.llama_set_abort_callback(handle, callback, None)
    try:
        yield
    finally:
        lc.llama_set_abort_callback(handle, lc.ggml_abort_callback(0), None)


MIDWAY_STOPS = 8
"""How many times in a row one call may be stopped within itself before it runs to its end
(`PromptReuse`): a backstop under any interrupt, so a prompt never stands still. A server's
`PromptHold` lets the call run sooner (8 completions take ~6 s on the 2-core CPU)."""

PROMPT_HOLD_S = 5.0
"""How long editors' requests may keep another request's prompt from moving on (`serve
--prompt-hold`): a burst of completions (~0.75 s each on the 2-core CPU) goes through at once,
and a prompt under a steady stream of them still finishes a call every ~6 s."""


class PromptHold:
    """The interrupt a server's worker gives a request's prompt processing: stop it while
    `urgent` says more urgent work waits, between calls always and within a call until the
    prompt has gone `hold_s` seconds without finishing one; then the call under way runs to
    its end.

    Progress is read from `position` (the tokens the cache holds: a finished call adds its
    tokens, a stopped one none) at every question, urgent or not. The prefill asks once
    between two calls and, through llama.cpp's abort callback, many times within one; the
    first question that sees a new position is the one right after a call ended, where a
    stop wastes nothing. The prompt's very first question (within its first call on a CPU)
    starts the hold. With `hold_s` 0 a prompt stops only right after a call ended."""

    def __init__(
        self,
        urgent: Callable[[], bool],
        position: Callable[[], int],
        hold_s: float = PROMPT_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urgent = urgent
        self.position = position
        self.hold_s = hold_s
        self.clock = clock
        self._at: int | None = None  # the position last seen
        self._since = 0.0  # when it was first seen: the prompt's last progress

    def __call__(self) -> bool:
        now, at = self.clock(), self.position()
        moved = self._at is not None and at != self._at
        if at != self._at:
            self._at, self._since = at, now
        if not self.urgent():
            return False
        return moved or now - self._since < self.hold_s
