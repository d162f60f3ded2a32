"""How a context's prefill reuses what earlier prompts left: the common prefix, shifted chunks,
parked tokens, and states saved in host memory and on disk; and how it processes the rest.

`PromptReuse` is the policy around one `LlamaContext`, which stays the thin wrapper: its
token list, decode, truncate and saved states. KV entries are still removed only by
`LlamaContext.truncate` and moved only here, in `_shift`.

Reuse across requests: `prefill` keeps the common prefix and, given `reuse_min`, shifts
later cached chunks of at least that many tokens into place (`localspec.llama.reuse`), as
llama-server's `--cache-reuse` does. A shifted chunk's keys are re-rotated to their new
positions (llama.cpp applies the RoPE shift lazily, at the next decode), not recomputed: its
values were computed attending to the tokens that were removed, so logits after it differ
from a cold prefill's. Caches that cannot shift (recurrent, some sliding-window ones) get
prefix reuse only (`can_shift`). Where chunk reuse is on, the old tokens a prefill would drop
are parked instead (`LlamaContext.parked`, `localspec.llama.parked`: in sequence 1 during the
prefill, in host memory after it) for a later prefill's reuse walk to take back; sequence 0
stays the token list.

A deadline makes `prefill` process the prompt in sub-batches and stop after the first one
that ends past it: the cache then holds a prefix of the prompt, and the next prefill goes on
from there. Sub-batches are sized from the measured prompt rate to take half the time left,
at least `MIN_SUB_BATCH` tokens (so every call makes progress, and no shorter tail is left
for the next) and at most a piece (`localspec.llama.pieces`): a deadline is overrun by at most
one sub-batch.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localspec.errors import DecodeError
from localspec.llama.model import LlamaModel
from localspec.llama.parked import ParkedTokens
from localspec.llama.pieces import (
    MIDWAY_STOPS,
    SHARED_PIECE_S,
    DecodeAbortedError,
    abortable,
    next_piece,
)
from localspec.llama.prompt_cache import MIN_SAVED_TOKENS, PromptCache, SavedState
from localspec.llama.prompt_store import PromptStore
from localspec.llama.reuse import chunk_moves

Logits = npt.NDArray[np.float32]

_log = logging.getLogger(__name__)

NO_TOKEN = -1
"""Separates the cache's tokens from the parked ones in the reuse walk: no prompt has it."""

MIN_SUB_BATCH = 16
"""The fewest prompt tokens a prefill under a deadline decodes at a time (and at least once)."""


@dataclass(frozen=True)
class Prefilled:
    """What one prefill reused rather than processed, returned by the call that did it: a
    server's slots take turns on one context, so figures left on it for callers to read
    afterwards would be whichever prefill ran last, and a prefill that stopped at its
    deadline or an interrupt says here what it reused before it stopped (`n_past` says how
    far it got)."""

    reused: int  # prompt tokens the cache held without processing them
    shifted: int = 0  # of them, chunks moved into place (from the cache or parked tokens)
    restored: int = 0  # all `reused` where a saved state was restored for them, else 0

    def at_most(self, reused: int) -> Prefilled:
        """This record where no more than `reused` tokens were kept (a prefill that decodes
        the last prompt token again for its logits)."""
        return Prefilled(
            min(self.reused, reused), min(self.shifted, reused), min(self.restored, reused)
        )


class ReusedContext(Protocol):
    """What a prefill needs of its context (`LlamaContext` is the one): named here, not
    imported, because the context imports this module."""

    handle: Any
    memory: Any
    parked: ParkedTokens
    shift_pending: bool
    parked_shift_pending: bool

    @property
    def model(self) -> LlamaModel: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_batch(self) -> int: ...

    @property
    def piece(self) -> int: ...

    @property
    def shared_piece(self) -> int: ...

    @property
    def can_shift(self) -> bool: ...

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def n_past(self) -> int: ...

    def common_prefix(self, tokens: Sequence[int]) -> int: ...

    def decode(
        self, tokens: Sequence[int], *, logits: Literal["none", "last", "all"]
    ) -> Logits: ...

    def truncate(self, length: int) -> None: ...

    def shifted(self, kept: list[int]) -> None: ...

    def settle_shift(self) -> None: ...

    def save_state(self) -> SavedState: ...

    def restore_state(self, state: SavedState) -> None: ...


class PromptReuse:
    """A context's prefill: what it reuses of earlier prompts (the RAM `cache`, the disk
    `store`, parked tokens, shifted chunks) and how it processes the rest (pieces, deadline
    sub-batches, interrupts), with `progress` for a server's `/health` while it works."""

    def __init__(
        self, context: ReusedContext, cache: PromptCache | None, store: PromptStore | None
    ) -> None:
        # a proxy: the context owns this object, and a strong reference back would be a
        # cycle keeping the saved states until the cycle collector runs
        self._context: ReusedContext = weakref.proxy(context)
        self.cache = cache
        self.store = store
        self.progress = (0, 0)  # prompt tokens processed, of how many (0, 0): none
        # whether the last prefill shifted chunks: the next one settles that shift before it
        # saves or restores a state (`_use_saved`; a decode since may have settled it already)
        self._shifted_before = False
        self._prompt_rate: float | None = None  # tokens/s of the last timed prompt decode
        self._stopped = (-1, 0)  # where calls were last stopped midway, and how often in a row
        self._shared_until = 0.0  # a `clock()`: prompts take shared pieces until then
        self.clock: Callable[[], float] = time.monotonic

    # -- prefill --------------------------------------------------------------------------
    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> Prefilled:
        """Make the cache hold `tokens`, reusing the common prefix and, with `reuse_min` > 0
        where the cache can shift, every later cached chunk of at least `reuse_min` tokens.

        Returns what was reused, not processed (`Prefilled`). With a `deadline` (a
        `time.perf_counter()` value) the cache may end up holding only a prefix of `tokens`
        (see the module's docstring): compare `n_past`. `restore` False uses no saved state
        (a prompt to be processed afresh).
        """
        prefilled = self._reuse(tokens, reuse_min, restore)
        self._shifted_before = prefilled.shifted > 0
        reused = prefilled.reused
        self._context.truncate(reused)
        self._stow_parked(reuse_min)
        if reused < len(tokens):
            self._process(tokens[reused:], deadline)
            self._store(len(tokens) - reused)
        return prefilled

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[Prefilled, Logits | None]:
        """`prefill` that also returns the logits after the last token, from the prompt's
        last batch (as llama-server takes its first token), sparing the one-token decode
        that would otherwise follow; the last token is decoded even when it was cached.
        The logits are None when the deadline stopped processing before the end, or
        `interrupt` did (asked between calls and within them: more urgent work waits).
        Calls start where they would have without the stop (`localspec.llama.pieces`), so a
        prefill that goes on from where one stopped decodes the same calls as one that never
        stopped."""
        if not tokens:
            raise DecodeError("a prompt needs at least one token to have logits after it")
        prefilled = self._reuse(tokens, reuse_min, restore).at_most(len(tokens) - 1)
        self._shifted_before = prefilled.shifted > 0
        reused = prefilled.reused
        self._context.truncate(reused)
        self._stow_parked(reuse_min)
        row = self._process(tokens[reused:], deadline, last=True, interrupt=interrupt)
        self._store(len(tokens) - reused)
        return prefilled, row

    def _stow_parked(self, reuse_min: int) -> None:
        """Before a prefill processes its tokens: parked cells go to host memory
        (`ParkedTokens.stow`), or, fewer than `reuse_min` of them (what a take left over), go.
        Not after: attention walks every cell up to the highest in use, masked or not, and on
        the llama.vim replay ~3,100 parked cells made the prefill after a cursor jump 4%
        slower. A pending shift on them (keys an earlier prefill moved, parked before any
        decode re-rotated them) is applied first (`settle_shift`): a copy would keep it."""
        context = self._context
        parked = context.parked
        if not parked.in_cache:
            return
        if len(parked) < max(1, reuse_min):
            parked.drop()
            return
        if context.parked_shift_pending:
            if not context.n_past:  # no token to decode again: a copy would be wrong
                parked.drop()
                return
            context.settle_shift()
        parked.stow()

    # -- reuse ----------------------------------------------------------------------------
    def _reuse(self, tokens: Sequence[int], reuse_min: int, restore: bool = True) -> Prefilled:
        """Restore a saved state and shift cached chunks into place where that serves
        `tokens`; returns how many of them the cache then holds in front (it may hold more
        old tokens after them, which the caller truncates), and how they came there."""
        context = self._context
        restored = restore and self._use_saved(tokens, reuse_min)
        reused = context.common_prefix(tokens)
        shifted = 0
        if reuse_min > 0 and context.can_shift and reused < len(tokens):
            shifted = self._shift(tokens, reused, reuse_min)
            reused += shifted
        return Prefilled(reused, shifted, reused if restored else 0)

    def _shift(self, tokens: Sequence[int], start: int, min_len: int) -> int:
        """Move the cached chunks `chunk_moves` finds into place, from the cache or from the
        parked tokens, and park what is left of the old cache if it is long enough to be
        worth taking back (`localspec.llama.parked`); returns how many tokens after `start`
        the cache now shares with `tokens`.

        The walk sees the parked tokens as if they followed the cache. Between two moves the
        cache holds `tokens[:end]` at positions 0..end-1 and the old tokens after the last
        chunk moved at their old positions, so each move from the cache removes the old
        tokens before its chunk and shifts the chunk down to `end`; before the first move
        from the parked tokens, the old cache after `end` goes."""
        context = self._context
        memory, parked = context.memory, context.parked
        old = context.tokens
        cached = len(old)
        parked_from = parked.start  # the walk's parked tokens are at positions from here
        # this walk moves no cell it parks; an earlier prefill's moves may not be applied yet
        moved_before = context.shift_pending
        end, left_at = start, start  # left_at: where the old tokens still in place begin
        for move in chunk_moves(self._held(old), tokens, start, min_len):
            if move.source > cached:
                if left_at < cached:
                    lc.llama_memory_seq_rm(memory, 0, end, -1)
                    left_at = cached
                if not parked.fetch(context.n_ctx - end):
                    break  # a stowed copy that does not fit beside tokens[:end]
                parked.take(parked_from + move.source - cached - 1, move.length, end)
            elif not lc.llama_memory_seq_rm(memory, 0, move.dest, move.source):
                break  # not where `can_shift` holds; the cache still holds tokens[:end]
            else:
                shift = move.dest - move.source
                lc.llama_memory_seq_add(memory, 0, move.source, move.source + move.length, shift)
                left_at = move.source + move.length
            end = move.dest + move.length
            context.shift_pending = True
        left = old[left_at:] if left_at < cached else ()
        if len(left) >= min_len:
            parked.park(left, left_at)
            context.parked_shift_pending = moved_before
        if end == start and not left:
            return 0
        context.shifted(list(tokens[:end]))
        return end - start

    def _held(self, cached: Sequence[int]) -> Sequence[int]:
        """The cache's tokens, then the parked ones, for the reuse walk; a token no prompt
        has (-1) between them keeps a chunk from running across the two."""
        parked = self._context.parked
        if not parked:
            return cached
        return [*cached, NO_TOKEN, *parked.tokens]

    def _reusable(self, tokens: Sequence[int], reuse_min: int) -> int:
        """How many tokens of `tokens` `prefill` would reuse from the cache as it is."""
        context = self._context
        reusable = context.common_prefix(tokens)
        if reuse_min > 0 and context.can_shift:
            moves = chunk_moves(self._held(context.tokens), tokens, reusable, reuse_min)
            reusable += sum(move.length for move in moves)
        return reusable

    # -- saved states (`localspec.llama.prompt_cache`, `localspec.llama.prompt_store`) ------
    def _use_saved(self, tokens: Sequence[int], reuse_min: int) -> bool:
        """Restore a saved state from host memory (`_use_memory_cache`) or, failing that, from
        disk (`_use_prompt_store`), where one offers `tokens` more than the cache does."""
        return self._use_memory_cache(tokens, reuse_min) or self._use_prompt_store(
            tokens, reuse_min
        )

    def _use_memory_cache(self, tokens: Sequence[int], reuse_min: int) -> bool:
        """Restore the saved state that offers `tokens` more than the cache does, if one
        does (True), saving the cache's state first where it is replaced or `tokens` would
        keep less than half of it (llama-server's slot selection saves at f_keep < 0.5).

        Nothing is restored into an empty cache: it was emptied on purpose, for a prompt
        processed afresh (a request's `cache_prompt` false), or by a failed restore."""
        context, cache = self._context, self.cache
        if cache is None or not context.n_past:
            return False
        if not cache.entries and context.n_past < MIN_SAVED_TOKENS:
            return False
        current = self._reusable(tokens, reuse_min)
        # with chunk reuse, a restore replaces the cache's tail, which would be parked: worth
        # it only for at least a chunk more (on the llama.vim replay a 6-token gain restored
        # an old state, and the window a warm-up had just parked was lost)
        parks = reuse_min > 0 and context.can_shift and context.n_past - current >= reuse_min
        margin = reuse_min if parks else 0
        state = cache.best(tokens, current + margin)
        if state is not None or 2 * current < context.n_past:
            if self._shifted_before:
                context.settle_shift()
            cache.save(context)
        if state is None:
            return False
        try:
            context.restore_state(state)
        except DecodeError as exc:  # the cache is empty: the prompt is processed in full
            _log.warning("%s", exc)
            return False
        return True

    def _use_prompt_store(self, tokens: Sequence[int], reuse_min: int) -> bool:
        """Restore the stored state that offers `tokens` more than the cache does, into an
        empty cache too (a restarted server's). A cache the state replaces is kept in the
        memory cache where it is worth it (`_use_memory_cache` already decided)."""
        context, store = self._context, self.store
        if store is None:
            return False
        current = self._reusable(tokens, reuse_min) if context.n_past else 0
        state = store.best(tokens, current)
        if state is None:
            return False
        if self._shifted_before:
            context.settle_shift()
        try:
            context.restore_state(state)
        except DecodeError as exc:
            _log.warning("%s (the stored state is deleted)", exc)
            store.forget(state.tokens)
            return False
        return True

    def _store(self, processed: int) -> None:
        """After `processed` new prompt tokens: put the cache's state on disk if the prompt is
        long enough to be worth a file, and is not held there already."""
        context, store = self._context, self.store
        if store is None or processed < 1 or context.shift_pending:
            return  # (a state saved with keys not yet re-rotated would be wrong)
        if store.worth_saving(context.tokens):
            store.save(context.save_state())

    # -- processing -----------------------------------------------------------------------
    def _process(
        self,
        tokens: Sequence[int],
        deadline: float | None,
        *,
        last: bool = False,
        interrupt: Callable[[], bool] | None = None,
    ) -> Logits | None:
        """Decode prompt tokens: all of them, in `piece`-token calls, or sub-batches until
        one ends past `deadline`; `interrupt` may stop it between two calls or during one
        (`localspec.llama.pieces.abortable`: the cache then ends where the call began); a
        server's worker gives a `PromptHold`, which keeps the prompt moving. Whatever the
        interrupt, a call stopped midway `MIDWAY_STOPS` times in a row runs to its end.
        With `last`, returns the logits after the final token (None if it was not reached).
        `progress` says how far it is, for a server's `/health` while it works."""
        context = self._context
        at, stops = self._stopped
        stops = stops if at == context.n_past else 0
        # a recurrent state cannot drop a stopped call's part (llama.cpp advanced it before
        # the graph ran): such a model's calls are stopped between calls only
        midway = interrupt if stops < MIDWAY_STOPS and not context.model.recurrent else None
        try:
            with abortable(context.handle, midway):
                return self._process_calls(tokens, deadline, last, interrupt)
        except DecodeAbortedError:  # what the call decoded is gone, and is decoded again whole
            self._stopped = (context.n_past, stops + 1)
            self._shared_until = self.clock() + SHARED_PIECE_S
            return None
        finally:
            self.progress = (0, 0)

    def call_size(self) -> int:
        """Tokens per prompt call now: the context's shared piece while a prompt was stopped
        in the last `SHARED_PIECE_S` seconds (editors' requests are coming), else its piece
        (`localspec.llama.pieces`)."""
        context = self._context
        return context.shared_piece if self.clock() < self._shared_until else context.piece

    def _process_calls(
        self,
        tokens: Sequence[int],
        deadline: float | None,
        last: bool,
        interrupt: Callable[[], bool] | None,
    ) -> Logits | None:
        context = self._context
        done = 0
        while done < len(tokens):
            self.progress = (done, len(tokens))
            left = len(tokens) - done
            if deadline is None:
                size = next_piece(left, self.call_size(), context.n_batch)
            else:
                size = self._sub_batch(deadline - time.perf_counter())
                if left - size < MIN_SUB_BATCH and left <= context.n_batch:
                    size = left  # no tail too short to be worth another request
            row = self._timed_decode(tokens[done : done + size], last and size >= left)
            done += size
            if done >= len(tokens):
                return row
            if deadline is not None and time.perf_counter() >= deadline:
                return None
            if interrupt is not None and interrupt():
                self._shared_until = self.clock() + SHARED_PIECE_S
                return None
        return None

    def _sub_batch(self, left_s: float) -> int:
        """Tokens that take about half of `left_s` at the last measured prompt rate."""
        if self._prompt_rate is None:
            return MIN_SUB_BATCH
        return max(MIN_SUB_BATCH, min(self._context.piece, int(self._prompt_rate * left_s / 2)))

    def _timed_decode(self, tokens: Sequence[int], last: bool = False) -> Logits | None:
        """Decode prompt tokens, measuring the prompt rate; the last one's logits if asked."""
        started = time.perf_counter()
        rows = self._context.decode(tokens, logits="last" if last else "none")
        elapsed = time.perf_counter() - started
        if len(tokens) >= MIN_SUB_BATCH and elapsed > 0:
            self._prompt_rate = len(tokens) / elapsed
        return rows[0] if last and len(rows) else None
