"""How prompt processing splits a prompt into llama_decode calls, and stops one midway.

A prompt goes to llama.cpp in calls of the whole batch (512 tokens, llama-server's ubatch)
unless the user fixes the size (`--ubatch-size`). On a CPU the size matters at long contexts:
with flash attention each call reads the whole cache again, and at 8k tokens of context
512-token calls processed 41.9 tokens/s against 38.9 in 128-token calls (2-core Xeon, 4
interleaved rounds of 512 tokens, every round in the same order).

A server's worker stops a prompt for an editor's request between two calls, or during one:
llama.cpp's CPU backend asks an abort callback between the operations of its graph
(`abortable`), and a call stopped so keeps nothing (llama.cpp drops its cells:
`DecodeAbortedError`) and is decoded again whole when the prompt goes on. A 512-token call
takes 5-15 s on a CPU, which a stop throws away, and which an editor waits for where the
prompt may no longer be stopped (`PromptHold`). So once a prompt was stopped, the context
decodes prompts in `shared` pieces (`CPU_PIECE` tokens on a CPU, ~1.3-3.7 s: editors' requests
come in bursts) until `SHARED_PIECE_S` seconds pass without a stop. On a GPU a 512-token
batch takes tens of milliseconds: there both are the whole batch.

Every call but a prompt's only one has at least `MIN_CALL` tokens and starts at a multiple
of `MIN_CALL` from the prompt's start (`next_piece`): a call of fewer than ~64 tokens takes
other CPU kernels, and a call's last rows, past its last whole block, take others again, so
two schedules give the same bytes only where each token's row falls on the same kernel in
both. With that, whole batches and 128-token pieces give the same logits and cache, bit for
bit (a real-model test holds this): a prompt gives the same answer whether or not anything
stopped it or changed its calls' sizes. However often editors ask, the prompt moves on:
`PromptHold` stops it only until it has gone `hold_s` seconds without finishing a call, and
then lets the call under way run to its end.
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
"""Prompt tokens per llama_decode call on a CPU while editors' requests come (a prompt was
stopped in the last `SHARED_PIECE_S` seconds)."""

SHARED_PIECE_S = 30.0
"""How long after a prompt was stopped for more urgent work its context keeps decoding
prompts in shared pieces: an editor's requests come in bursts while the user types."""

MIN_PIECE = 16
"""The smallest `--ubatch-size`: below it each call's overhead dominates."""

MAX_PIECE = 512
"""The largest `--ubatch-size`: the batch localspec's contexts are made with."""

MIN_CALL = 64
"""The fewest tokens a call takes where a prompt has more: below it llama.cpp's CPU
backend takes other kernels, which round apart from the larger calls'."""


def next_piece(left: int, piece: int, n_batch: int) -> int:
    """How many of the `left` prompt tokens the next call decodes: `piece`, or all of them
    where what would remain is under half a piece and the whole fits one batch. Pieces of
    `2 * MIN_CALL` tokens or more leave no call under `MIN_CALL` tokens: a tail under it
    joins the call before it where the two fit a batch, else that call ends at the last
    multiple of `MIN_CALL` that leaves the tail at least as many. So every call but the
    last starts and ends at a multiple of `MIN_CALL` from the prompt's start, in whole
    batches and in pieces alike, and the last call's rows fall on the same kernels in both
    (llama.cpp's CPU matrix products take rows in blocks counted from a call's start).
    (Smaller pieces are the user's `--ubatch-size`, the same in every call.)"""
    rest = left - piece
    keeps_calls_long = piece >= 2 * MIN_CALL
    short = max(piece // 2, MIN_CALL) if keeps_calls_long else piece // 2
    if rest <= 0 or (rest < short and left <= n_batch):
        return left
    if keeps_calls_long and rest < MIN_CALL:
        return (left - MIN_CALL) // MIN_CALL * MIN_CALL  # the next call starts as a piece would
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
