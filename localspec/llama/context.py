"""A llama.cpp context whose KV cache is kept in lock-step with a Python token list.

`tokens` is always exactly what the KV cache holds (sequence 0, positions 0..n-1). Every
change goes through `decode` (append), `truncate` (the one place KV entries are removed) or
the prefill's chunk shifting (`localspec.llama.prefill`, the one place they move), so
speculative rollback and reuse across requests cannot drift out of sync.

What a prefill reuses of earlier prompts (shifted chunks, parked tokens, saved states in
host memory and on disk) and how it processes the rest is `PromptReuse`'s
(`localspec.llama.prefill`); the context keeps the handle, the token list, decoding, and
saving and restoring its state, and passes `prefill` on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localspec.errors import DecodeError, ModelLoadError
from localspec.lifetime import Closing
from localspec.llama.backend import DecodeTimes, WhichLogits, bytes_pointer, fill_batch
from localspec.llama.model import LlamaModel
from localspec.llama.params import context_params
from localspec.llama.parked import ParkedTokens
from localspec.llama.pieces import LLAMA_ABORTED, DecodeAbortedError
from localspec.llama.prefill import Prefilled, PromptReuse
from localspec.llama.prompt_cache import PromptCache, SavedState, common_prefix
from localspec.llama.prompt_store import PromptStore

Logits = npt.NDArray[np.float32]

_log = logging.getLogger(__name__)


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
        shared_piece: int | None = None,
        value_cache: str = "f16",
    ) -> None:
        """`prompt_cache_bytes` > 0 keeps states of earlier prompts (`PromptReuse`),
        `prompt_store` states of long prompts on disk, across processes; `flash_attn` None
        leaves flash attention to llama.cpp (on wherever it is supported). `rollback` keeps
        that many recurrent-state snapshots (llama.cpp's n_rs_seq), so that a recurrent or
        hybrid model (Qwen3.5) can drop a rejected draft instead of `_rebuild`ing its prefix;
        llama.cpp keeps the last rollback + 1 tokens of a batch in one ubatch, so `n_batch`
        must exceed that (it asserts otherwise). `piece` is how many prompt tokens one
        llama_decode call takes (`localspec.llama.pieces`; None: the whole batch), and
        `shared_piece` how many while editors' requests stop prompts (None: `piece`).
        `value_cache` is the values' element type in the KV cache (`VALUE_CACHE_TYPES`)."""
        self.model = model
        params = context_params(
            n_ctx,
            n_batch=n_batch,
            n_threads=n_threads,
            max_outputs=max_outputs,
            flash_attn=flash_attn,
            rollback=rollback,
            value_cache=value_cache,
        )
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
        self.shared_piece = min(shared_piece or self.piece, self.n_batch)
        self.max_outputs = int(params.n_outputs_max)
        self.n_threads = int(params.n_threads)
        self.flash_attn = flash_attn  # as asked; None: llama.cpp's choice
        self.value_cache = value_cache
        self.memory = lc.llama_get_memory(handle)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._tokens: list[int] = []
        self.timings = DecodeTimes()
        # whether chunks can move to other positions (llama-server asks the same)
        self.can_shift = bool(lc.llama_memory_can_shift(self.memory))
        self.parked = ParkedTokens(handle)  # what prompts left behind, to take back
        self.shift_pending = False  # keys moved since the last decode, not yet re-rotated
        self.parked_shift_pending = False  # parked cells may hold keys not re-rotated yet
        cache = PromptCache(prompt_cache_bytes) if prompt_cache_bytes > 0 else None
        self.reuse = PromptReuse(self, cache, prompt_store)  # what prefills reuse, and how
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
        if not lc.llama_memory_seq_rm(self.memory, 0, length, -1):
            self._rebuild(self._tokens[:length])
            return
        del self._tokens[length:]

    def _rebuild(self, keep: list[int]) -> None:
        """Recurrent or sliding-window caches cannot drop a suffix: recompute the prefix."""
        lc.llama_memory_clear(self.memory, True)
        self._tokens = []
        self.parked.cells_lost()
        self.decode(keep, logits="none")

    def shifted(self, kept: list[int]) -> None:
        """After the prefill's chunk shifting (`localspec.llama.prefill`) moved cells: the
        cache holds `kept` at positions 0..len(kept)-1 and old cells after them, which go."""
        if lc.llama_memory_seq_rm(self.memory, 0, len(kept), -1):
            self._tokens = kept
        else:
            self._rebuild(kept)

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """Length of the longest common prefix between the cache and `tokens`."""
        n = min(len(self._tokens), len(tokens))
        if self._tokens[:n] == list(tokens[:n]):  # the common case, a list comparison
            return n
        return common_prefix(np.asarray(self._tokens[:n], dtype=np.int32), tokens[:n])

    def prefill(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
    ) -> Prefilled:
        """Make the cache hold `tokens`, reusing what it can (`PromptReuse.prefill`)."""
        return self.reuse.prefill(tokens, reuse_min=reuse_min, deadline=deadline, restore=restore)

    def prefill_logits(
        self,
        tokens: Sequence[int],
        *,
        reuse_min: int = 0,
        deadline: float | None = None,
        restore: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[Prefilled, Logits | None]:
        """`prefill`, and the logits after the last token (`PromptReuse.prefill_logits`)."""
        return self.reuse.prefill_logits(
            tokens, reuse_min=reuse_min, deadline=deadline, restore=restore, interrupt=interrupt
        )

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
            base = len(self._tokens)
            rows_asked: WhichLogits = (
                "none" if logits == "last" and start + step < len(tokens) else logits
            )
            n_out = fill_batch(batch, chunk, base, rows=rows_asked)
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
            self.shift_pending = self.parked_shift_pending = False
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
        lc.llama_memory_seq_rm(self.memory, 0, len(self._tokens), -1)
        held = int(lc.llama_memory_seq_pos_max(self.memory, 0)) + 1
        if held != len(self._tokens):
            _log.warning(
                "the KV cache held %d tokens where %d were expected: it is cleared",
                held,
                len(self._tokens),
            )
            lc.llama_memory_clear(self.memory, True)
            self._tokens = []
            self.parked.cells_lost()

    def settle_shift(self) -> None:
        """Decode the last token again, so llama.cpp applies a pending shift: it re-rotates
        shifted keys at the next decode, and a state saved before would keep them unrotated
        at their new positions."""
        last = self._tokens[-1]
        self.truncate(len(self._tokens) - 1)
        self.decode([last], logits="none")

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
        held = int(lc.llama_memory_seq_pos_max(self.memory, 0)) + 1
        if read != state.size or held != len(state.tokens):
            lc.llama_memory_clear(self.memory, True)
            self._tokens = []
            self.parked.cells_lost()
            raise DecodeError(
                f"llama.cpp could not restore a saved prompt state ({read} of {state.size} "
                f"bytes read, {held} of {len(state.tokens)} tokens): it was not saved from this "
                f"model and context; the KV cache is now empty"
            )
        self._tokens = state.tokens.tolist()
