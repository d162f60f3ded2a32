"""A llama.cpp context whose KV cache is kept in lock-step with a Python token list.

`tokens` is always exactly what the KV cache holds (sequence 0, positions 0..n-1). Every
change goes through `decode` (append), `truncate` (the one place KV entries are removed) or
`prefill`'s chunk shifting (`_shift`, the one place they move), so speculative rollback and
reuse across requests cannot drift out of sync.

Reuse across requests: `prefill` keeps the common prefix and, given `reuse_min`, shifts
later cached chunks of at least that many tokens into place (`localspec.llama.reuse`), as
llama-server's `--cache-reuse` does. A shifted chunk's keys are re-rotated to their new
positions (llama.cpp applies the RoPE shift lazily, at the next decode), not recomputed: its
values were computed attending to the tokens that were removed, so logits after it differ
from a cold prefill's. Caches that cannot shift (recurrent, some sliding-window ones) get
prefix reuse only (`can_shift`). Where chunk reuse is on, the old tokens a prefill would drop
are parked instead (`parked`, `localspec.llama.parked`: in sequence 1 during the prefill, in
host memory after it) for a later prefill's reuse walk to take back; sequence 0 stays the
token list.

A deadline makes `prefill` process the prompt in sub-batches and stop after the first one
that ends past it: the cache then holds a prefix of the prompt, and the next prefill goes on
from there. Sub-batches are sized from the measured prompt rate to take half the time left,
at least `MIN_SUB_BATCH` tokens (so every call makes progress, and no shorter tail is left
for the next) and at most a piece (`localspec.llama.pieces`): a deadline is overrun by at most
one sub-batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Literal

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localspec.errors import DecodeError, ModelLoadError
from localspec.lifetime import Closing
from localspec.llama.backend import DecodeTimes, bytes_pointer, set_fields
from localspec.llama.model import LlamaModel
from localspec.llama.parked import N_SEQUENCES, ParkedTokens
from localspec.llama.pieces import (
    LLAMA_ABORTED,
    MIDWAY_STOPS,
    DecodeAbortedError,
    abortable,
    next_piece,
)
from localspec.llama.prompt_cache import MIN_SAVED_TOKENS, PromptCache, SavedState
from localspec.llama.prompt_store import PromptStore
from localspec.llama.reuse import chunk_moves

Logits = npt.NDArray[np.float32]
WhichLogits = Literal["none", "last", "all"]

_log = logging.getLogger(__name__)

NO_TOKEN = -1
"""Separates the cache's tokens from the parked ones in the reuse walk: no prompt has it."""

MIN_SUB_BATCH = 16
"""The fewest prompt tokens a prefill under a deadline decodes at a time (and at least once)."""


_FLASH_ATTN = {
    None: lc.LLAMA_FLASH_ATTN_TYPE_AUTO,
    True: lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    False: lc.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}

VALUE_CACHE_TYPES = {"f16": lc.GGML_TYPE_F16, "bf16": 30}  # ggml.h's GGML_TYPE_BF16
"""The value cache's element types a context may keep: llama.cpp's f16, or bf16, which keeps
its CPU flash attention on one kernel for one token and a batch alike (docs/exactness.md)."""


def default_threads() -> int:
    """All cores: decoding is memory-bound and this is a single-user, foreground tool."""
    return max(1, os.cpu_count() or 1)


class LlamaContext(Closing):
    """One sequence of KV cache over a model, with logits requested only where needed."""

    def __init__(
        self,
        model: LlamaModel,
        n_ctx: int,
        *,
        n_batch: int = 512,
        n_threads: int | None = None,
        max_outputs: int = 65,
        prompt_cache_bytes: int = 0,
        flash_attn: bool | None = None,
        prompt_store: PromptStore | None = None,
        rollback: int = 0,
        piece: int | None = None,
        value_cache: str = "f16",
    ) -> None:
        """`prompt_cache_bytes` > 0 keeps states of earlier prompts (see `_use_prompt_cache`),
        `prompt_store` states of long prompts on disk, across processes; `flash_attn` None
        leaves flash attention to llama.cpp (on wherever it is supported). `rollback` keeps
        that many recurrent-state snapshots (llama.cpp's n_rs_seq), so that a recurrent or
        hybrid model (Qwen3.5) can drop a rejected draft instead of `_rebuild`ing its prefix;
        llama.cpp keeps the last rollback + 1 tokens of a batch in one ubatch, so `n_batch`
        must exceed that (it asserts otherwise). `piece` is how many prompt tokens one
        llama_decode call takes (`localspec.llama.pieces`; None: the whole batch).
        `value_cache` is the values' element type in the KV cache (`VALUE_CACHE_TYPES`)."""
        self.model = model
        params = lc.llama_context_default_params()
        threads = n_threads or default_threads()
        set_fields(
            params,
            n_ctx=n_ctx,
            n_batch=min(n_batch, n_ctx),
            n_ubatch=min(n_batch, n_ctx),
            # the prompt, tokens parked for the next one, one chunk moving back: one pool
            n_seq_max=N_SEQUENCES,
            kv_unified=True,
            # llama.cpp sizes its logits buffer for n_outputs_max rows (default n_batch): 512
            # rows of a 152k vocabulary is 311 MB; speculation needs 1 + k rows at most
            n_outputs_max=min(max_outputs, n_batch, n_ctx),
            n_threads=threads,
            n_threads_batch=threads,
            no_perf=True,
            flash_attn_type=_FLASH_ATTN[flash_attn],
            type_v=VALUE_CACHE_TYPES[value_cache],
            n_rs_seq=rollback,
        )
        if rollback and params.n_ubatch <= rollback + 1:  # llama.cpp would abort the process
            raise ModelLoadError(f"{rollback} rollback states need a batch of over {rollback + 1}")
        handle = lc.llama_init_from_model(model.handle, params)
        if not handle:
            raise ModelLoadError(
                f"llama.cpp could not create a {n_ctx}-token context for {model.path.name}: "
                f"lower --ctx-size (memory) or check the log with --verbose"
            )
        self.handle = handle
        self.n_ctx = int(lc.llama_n_ctx(handle))
        self.n_batch = int(params.n_batch)
        self.piece = min(piece or self.n_batch, self.n_batch)
        self.max_outputs = int(params.n_outputs_max)
        self.n_threads = int(params.n_threads)
        self.flash_attn = flash_attn  # as asked; None: llama.cpp's choice
        self.value_cache = value_cache
        self._memory = lc.llama_get_memory(handle)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._tokens: list[int] = []
        self.timings = DecodeTimes()
        # whether chunks can move to other positions (llama-server asks the same)
        self.can_shift = bool(lc.llama_memory_can_shift(self._memory))
        self.parked = ParkedTokens(handle)  # what prompts left behind, to take back
        self.last_shifted = 0  # tokens the last prefill reused by shifting them
        self._shift_pending = False  # keys moved since the last decode, not yet re-rotated
        self._parked_shift_pending = False  # parked cells may hold keys not re-rotated yet
        self._prompt_rate: float | None = None  # tokens/s of the last timed prompt decode
        self.prompt_cache = PromptCache(prompt_cache_bytes) if prompt_cache_bytes > 0 else None
        self.prompt_store = prompt_store
        self.prompt_progress = (0, 0)  # prompt tokens processed, of how many (0, 0): none
        self.last_restored = 0  # tokens the last prefill reused from a restored saved state
        self._stopped = (-1, 0)  # where calls were last stopped midway, and how often in a row
        # called with (position, tokens) after each decode, while its outputs are readable:
        # how an MTP head (`localspec.llama.mtp`) reads the target's hidden states
        self.decode_hooks: list[Callable[[int, Sequence[int]], None]] = []

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        if self.handle is not None:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self.handle)
            self.handle = None

    # -- state ----------------------------------------------------------------------------
    @property
    def tokens(self) -> Sequence[int]:
        """The tokens in the KV cache, in order (read-only view)."""
        return tuple(self._tokens)

    @property
    def n_past(self) -> int:
        return len(self._tokens)

    def truncate(self, length: int) -> None:
        """Forget every token from position `length` on: the only KV removal in localspec."""
        if length >= len(self._tokens):
            return
        if not lc.llama_memory_seq_rm(self._memory, 0, length, -1):
            self._rebuild(self._tokens[:length])
            return
        del self._tokens[length:]

    def _rebuild(self, keep: list[int]) -> None:
        """Recurrent or sliding-window caches cannot drop a suffix: recompute the prefix."""
        lc.llama_memory_clear(self._memory, True)
        self._tokens = []
        self.parked.cells_lost()
        self.decode(keep, logits="none")

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """Length of the longest common prefix between the cache and `tokens`."""
        n = min(len(self._tokens), len(tokens))
        if self._tokens[:n] == list(tokens[:n]):
            return n
        lo, hi = 0, n  # binary search on prefix equality: O(n log n) worst case, rare
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._tokens[:mid] == list(tokens[:mid]):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> int:
        """Make the cache hold `tokens`, reusing the common prefix and, with `reuse_min` > 0
        where the cache can shift, every later cached chunk of at least `reuse_min` tokens.

        Returns how many tokens were reused, not processed (`last_shifted` of them by
        shifting). With a `deadline` (a `time.perf_counter()` value) the cache may end up
        holding only a prefix of `tokens` (see the module's docstring): compare `n_past`.
        `restore` False uses no saved state (a prompt to be processed afresh).
        """
        reused = self._reuse(tokens, reuse_min, restore)
        self.truncate(reused)
        self._stow_parked(reuse_min)
        if reused < len(tokens):
            self._process(tokens[reused:], deadline)
            self._store(len(tokens) - reused)
        return reused

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[int, Logits | None]:
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
        reused = min(self._reuse(tokens, reuse_min, restore), len(tokens) - 1)
        self.last_shifted = min(self.last_shifted, reused)
        self.last_restored = min(self.last_restored, reused)
        self.truncate(reused)
        self._stow_parked(reuse_min)
        row = self._process(tokens[reused:], deadline, last=True, interrupt=interrupt)
        self._store(len(tokens) - reused)
        return reused, row

    def _stow_parked(self, reuse_min: int) -> None:
        """Before a prefill processes its tokens: parked cells go to host memory
        (`ParkedTokens.stow`), or, fewer than `reuse_min` of them (what a take left over), go.
        Not after: attention walks every cell up to the highest in use, masked or not, and on
        the llama.vim replay ~3,100 parked cells made the prefill after a cursor jump 4%
        slower. A pending shift on them (keys an earlier prefill moved, parked before any
        decode re-rotated them) is applied first (`_settle_shift`): a copy would keep it."""
        if not self.parked.in_cache:
            return
        if len(self.parked) < max(1, reuse_min):
            self.parked.drop()
            return
        if self._parked_shift_pending:
            if not self._tokens:  # no token to decode again: a copy would be wrong
                self.parked.drop()
                return
            self._settle_shift()
        self.parked.stow()

    def _reuse(self, tokens: Sequence[int], reuse_min: int, restore: bool = True) -> int:
        """Restore a saved state and shift cached chunks into place where that serves
        `tokens`; returns how many of them the cache then holds in front (it may hold more
        old tokens after them, which the caller truncates)."""
        restored = restore and self._use_prompt_cache(tokens, reuse_min)
        reused = self.common_prefix(tokens)
        self.last_shifted = 0
        if reuse_min > 0 and self.can_shift and reused < len(tokens):
            self.last_shifted = self._shift(tokens, reused, reuse_min)
            reused += self.last_shifted
        self.last_restored = reused if restored else 0
        return reused

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
        cached = len(self._tokens)
        parked_from = self.parked.start  # the walk's parked tokens are at positions from here
        # this walk moves no cell it parks; an earlier prefill's moves may not be applied yet
        moved_before = self._shift_pending
        end, left_at = start, start  # left_at: where the old tokens still in place begin
        for move in chunk_moves(self._held(), tokens, start, min_len):
            if move.source > cached:
                if left_at < cached:
                    lc.llama_memory_seq_rm(self._memory, 0, end, -1)
                    left_at = cached
                if not self.parked.fetch(self.n_ctx - end):
                    break  # a stowed copy that does not fit beside tokens[:end]
                self.parked.take(parked_from + move.source - cached - 1, move.length, end)
            elif not lc.llama_memory_seq_rm(self._memory, 0, move.dest, move.source):
                break  # not where `can_shift` holds; the cache still holds tokens[:end]
            else:
                shift = move.dest - move.source
                lc.llama_memory_seq_add(
                    self._memory, 0, move.source, move.source + move.length, shift
                )
                left_at = move.source + move.length
            end = move.dest + move.length
            self._shift_pending = True
        left = self._tokens[left_at:] if left_at < cached else []
        if len(left) >= min_len:
            self.parked.park(left, left_at)
            self._parked_shift_pending = moved_before
        if end == start and not left:
            return 0
        kept = list(tokens[:end])
        if lc.llama_memory_seq_rm(self._memory, 0, end, -1):
            self._tokens = kept
        else:
            self._rebuild(kept)
        return end - start

    def _held(self) -> list[int]:
        """The cache's tokens, then the parked ones, for the reuse walk; a token no prompt
        has (-1) between them keeps a chunk from running across the two."""
        if not self.parked:
            return self._tokens
        return [*self._tokens, NO_TOKEN, *self.parked.tokens]

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
        `prompt_progress` says how far it is, for a server's `/health` while it works."""
        at, stops = self._stopped
        stops = stops if at == len(self._tokens) else 0
        # a recurrent state cannot drop a stopped call's part (llama.cpp advanced it before
        # the graph ran): such a model's calls are stopped between calls only
        midway = interrupt if stops < MIDWAY_STOPS and not self.model.recurrent else None
        try:
            with abortable(self.handle, midway):
                return self._process_calls(tokens, deadline, last, interrupt)
        except DecodeAbortedError:  # what the call decoded is gone, and is decoded again whole
            self._stopped = (len(self._tokens), stops + 1)
            return None
        finally:
            self.prompt_progress = (0, 0)

    def _process_calls(
        self,
        tokens: Sequence[int],
        deadline: float | None,
        last: bool,
        interrupt: Callable[[], bool] | None,
    ) -> Logits | None:
        done = 0
        while done < len(tokens):
            self.prompt_progress = (done, len(tokens))
            left = len(tokens) - done
            if deadline is None:
                size = next_piece(left, self.piece, self.n_batch)
            else:
                size = self._sub_batch(deadline - time.perf_counter())
                if left - size < MIN_SUB_BATCH and left <= self.n_batch:
                    size = left  # no tail too short to be worth another request
            row = self._timed_decode(tokens[done : done + size], last and size >= left)
            done += size
            if done >= len(tokens):
                return row
            if deadline is not None and time.perf_counter() >= deadline:
                return None
            if interrupt is not None and interrupt():
                return None
        return None

    def _sub_batch(self, left_s: float) -> int:
        """Tokens that take about half of `left_s` at the last measured prompt rate."""
        if self._prompt_rate is None:
            return MIN_SUB_BATCH
        return max(MIN_SUB_BATCH, min(self.piece, int(self._prompt_rate * left_s / 2)))

    def _timed_decode(self, tokens: Sequence[int], last: bool = False) -> Logits | None:
        """Decode prompt tokens, measuring the prompt rate; the last one's logits if asked."""
        started = time.perf_counter()
        rows = self.decode(tokens, logits="last" if last else "none")
        elapsed = time.perf_counter() - started
        if len(tokens) >= MIN_SUB_BATCH and elapsed > 0:
            self._prompt_rate = len(tokens) / elapsed
        return rows[0] if last and len(rows) else None

    def sync(self, tokens: Sequence[int]) -> Logits:
        """Make the cache hold `tokens` and return the logits that follow the last one."""
        self.prefill(tokens[:-1])
        last: Logits = self.decode(tokens[-1:], logits="last")[0]
        return last

    # -- decoding -------------------------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        """Append `tokens` to the cache; return logits rows for none, the last, or all of them."""
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise DecodeError(
                f"{len(self._tokens) + len(tokens)} tokens do not fit the {self.n_ctx}-token "
                f"context: raise --ctx-size"
            )
        if self.parked.in_cache and self.n_past + len(tokens) + len(self.parked) > self.n_ctx:
            self.parked.drop()  # the prompt needs the cells they take
        rows: list[Logits] = []
        batch = self._batch
        step = self.max_outputs if logits == "all" else self.n_batch
        for start in range(0, len(tokens), step):
            chunk = tokens[start : start + step]
            final_chunk = start + step >= len(tokens)
            n_out = 0
            base = len(self._tokens)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = base + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                want = logits == "all" or (logits == "last" and final_chunk and i == len(chunk) - 1)
                batch.logits[i] = want
                n_out += want
            batch.n_tokens = len(chunk)
            started = time.perf_counter_ns()
            rc = lc.llama_decode(self.handle, batch)
            decoded = time.perf_counter_ns()
            self.timings.decode_ns += decoded - started
            if rc != 0:
                self._resync()
                if rc == LLAMA_ABORTED:
                    raise DecodeAbortedError(f"stopped after {len(self._tokens)} tokens")
                raise DecodeError(
                    f"llama_decode failed with code {rc} after {len(self._tokens)} tokens"
                    + (": the KV cache is full, raise --ctx-size" if rc == 1 else "")
                )
            self._tokens.extend(chunk)
            # llama.cpp applies pending shifts, parked cells' too, at every decode
            self._shift_pending = self._parked_shift_pending = False
            if n_out:
                ptr = lc.llama_get_logits(self.handle)
                rows.append(np.ctypeslib.as_array(ptr, shape=(n_out, self.model.n_vocab)).copy())
                self.timings.logits_ns += time.perf_counter_ns() - decoded
            for hook in self.decode_hooks:
                hook(base, chunk)
        if not rows:
            return np.empty((0, self.model.n_vocab), dtype=np.float32)
        stacked: Logits = rows[0] if len(rows) == 1 else np.concatenate(rows)
        return stacked

    def _resync(self) -> None:
        """After a failed decode: drop the ubatches llama.cpp may have kept, so the cache
        holds `tokens` again. Where it holds something else (a bug: llama.cpp refuses every
        later batch then), start over empty, so the next request is not refused too."""
        lc.llama_memory_seq_rm(self._memory, 0, len(self._tokens), -1)
        held = int(lc.llama_memory_seq_pos_max(self._memory, 0)) + 1
        if held != len(self._tokens):
            _log.warning(
                "the KV cache held %d tokens where %d were expected: it is cleared",
                held,
                len(self._tokens),
            )
            lc.llama_memory_clear(self._memory, True)
            self._tokens = []
            self.parked.cells_lost()

    # -- saved states (the prompt cache's, see `localspec.llama.prompt_cache`) ----------------
    def _use_prompt_cache(self, tokens: Sequence[int], reuse_min: int) -> bool:
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
        cache = self.prompt_cache
        if cache is None or not self._tokens:
            return False
        if not cache.entries and len(self._tokens) < MIN_SAVED_TOKENS:
            return False
        current = self._reusable(tokens, reuse_min)
        # with chunk reuse, a restore replaces the cache's tail, which would be parked: worth
        # it only for at least a chunk more (on the llama.vim replay a 6-token gain restored
        # an old state, and the window a warm-up had just parked was lost)
        parks = reuse_min > 0 and self.can_shift and len(self._tokens) - current >= reuse_min
        margin = reuse_min if parks else 0
        state = cache.best(tokens, current + margin)
        if state is not None or 2 * current < len(self._tokens):
            if self.last_shifted:
                self._settle_shift()
            cache.save(self)
        if state is None:
            return False
        try:
            self.restore_state(state)
        except DecodeError as exc:  # the cache is empty: the prompt is processed in full
            _log.warning("%s", exc)
            return False
        return True

    def _use_prompt_store(self, tokens: Sequence[int], reuse_min: int) -> bool:
        """Restore the stored state that offers `tokens` more than the cache does, into an
        empty cache too (a restarted server's). A cache the state replaces is kept in the
        memory cache where it is worth it (`_use_memory_cache` already decided)."""
        store = self.prompt_store
        if store is None:
            return False
        current = self._reusable(tokens, reuse_min) if self._tokens else 0
        state = store.best(tokens, current)
        if state is None:
            return False
        if self.last_shifted:
            self._settle_shift()
        try:
            self.restore_state(state)
        except DecodeError as exc:
            _log.warning("%s (the stored state is deleted)", exc)
            store.forget(state.tokens)
            return False
        return True

    def _store(self, processed: int) -> None:
        """After `processed` new prompt tokens: put the cache's state on disk if the prompt is
        long enough to be worth a file, and is not held there already."""
        store = self.prompt_store
        if store is None or processed < 1 or self._shift_pending:
            return  # (a state saved with keys not yet re-rotated would be wrong)
        if store.worth_saving(self._tokens):
            store.save(self.save_state())

    def _reusable(self, tokens: Sequence[int], reuse_min: int) -> int:
        """How many tokens of `tokens` `prefill` would reuse from the cache as it is."""
        reusable = self.common_prefix(tokens)
        if reuse_min > 0 and self.can_shift:
            moves = chunk_moves(self._held(), tokens, reusable, reuse_min)
            reusable += sum(move.length for move in moves)
        return reusable

    def _settle_shift(self) -> None:
        """Decode the last token again, so llama.cpp applies a pending shift: it re-rotates
        shifted keys at the next decode, and a state saved before would keep them unrotated
        at their new positions."""
        last = self._tokens[-1]
        self.truncate(len(self._tokens) - 1)
        self.decode([last], logits="none")

    def held_state(self) -> SavedState | None:
        """The cache's state for another sequence to take over the context (a server's slots
        take turns on one context; see `load`): None when empty. A pending shift is
        settled first, as for any saved state."""
        if not self._tokens:
            return None
        if self._shift_pending:
            self._settle_shift()
        return self.save_state()

    def load(self, state: SavedState | None) -> None:
        """Make the cache `state`'s (None: empty), whatever it held: a sequence taking its
        turn. Parked tokens stay with the context, where any sequence's reuse walk may take
        them back; a state that does not restore leaves the cache empty (`restore_state`)."""
        if state is None:
            self.truncate(0)
        else:
            self.restore_state(state)

    def save_state(self) -> SavedState:
        """A host-memory copy of the KV cache (sequence 0) and its tokens."""
        size = lc.llama_state_seq_get_size(self.handle, 0)
        data = bytearray(size)
        written = lc.llama_state_seq_get_data(self.handle, bytes_pointer(data), size, 0)
        if written != size:
            raise DecodeError(
                f"llama.cpp saved {written} of {size} bytes of the KV cache: the prompt cache "
                f"needs host memory for it (lower --cache-ram, or 0 to turn it off)"
            )
        return SavedState(np.array(self._tokens, dtype=np.int32), data)

    def restore_state(self, state: SavedState) -> None:
        """Make the KV cache and `tokens` exactly `state`'s; on failure (a state from another
        model or context) the cache is left empty and `DecodeError` raised. Parked cells are
        given up (the restored cells need the room); a stowed copy is kept."""
        if self.parked.in_cache:
            self.parked.drop()
        read = lc.llama_state_seq_set_data(self.handle, bytes_pointer(state.data), state.size, 0)
        held = int(lc.llama_memory_seq_pos_max(self._memory, 0)) + 1
        if read != state.size or held != len(state.tokens):
            lc.llama_memory_clear(self._memory, True)
            self._tokens = []
            self.parked.cells_lost()
            raise DecodeError(
                f"llama.cpp could not restore a saved prompt state ({read} of {state.size} "
                f"bytes read, {held} of {len(state.tokens)} tokens): it was not saved from this "
                f"model and context; the KV cache is now empty"
            )
        self._tokens = state.tokens.tolist()
