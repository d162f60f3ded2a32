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
never stopped, so an interrupted answer is the same answer. The first call after a stop within
a call is not stopped within itself (`LlamaContext._process`): however often an editor asks,
the prompt moves on. A short tail joins the piece before it: a call of fewer than ~64 tokens
takes other CPU kernels. On this CPU 128-token pieces gave the
same logits, bit for bit, as 512-token calls wherever those ended in a call of 64 tokens or
more (prompts of 900 and 1,100 tokens); where they ended in a short one (530 = 512 + 18) the
two round that tail differently, as a warm and a cold cache already do.
"""

from __future__ import annotations

import contextlib
import logging
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
