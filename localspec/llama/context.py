"""A llama.cpp context whose KV cache is kept in lock-step with a Python token list.

`tokens` is always exactly what the KV cache holds (sequence 0, positions 0..n-1). Every
change goes through `decode` (append) or `truncate` (the one place KV entries are removed),
so speculative rollback and prefix reuse across requests cannot drift out of sync.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt

from localspec.errors import DecodeError, ModelLoadError
from localspec.lifetime import Closing
from localspec.llama.backend import set_fields
from localspec.llama.model import LlamaModel

Logits = npt.NDArray[np.float32]
WhichLogits = Literal["none", "last", "all"]


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
    ) -> None:
        self.model = model
        params = lc.llama_context_default_params()
        threads = n_threads or default_threads()
        set_fields(
            params,
            n_ctx=n_ctx,
            n_batch=min(n_batch, n_ctx),
            n_ubatch=min(n_batch, n_ctx),
            n_seq_max=1,
            # llama.cpp sizes its logits buffer for n_outputs_max rows (default n_batch): 512
            # rows of a 152k vocabulary is 311 MB; speculation needs 1 + k rows at most
            n_outputs_max=min(max_outputs, n_batch, n_ctx),
            n_threads=threads,
            n_threads_batch=threads,
            no_perf=True,
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
        self.max_outputs = int(params.n_outputs_max)
        self.n_threads = int(params.n_threads)
        self._memory = lc.llama_get_memory(handle)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._tokens: list[int] = []

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
            # Recurrent or sliding-window caches cannot drop a suffix: rebuild the prefix.
            keep = self._tokens[:length]
            lc.llama_memory_clear(self._memory, True)
            self._tokens = []
            self.decode(keep, logits="none")
            return
        del self._tokens[length:]

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

    def prefill(self, tokens: Sequence[int]) -> int:
        """Make the cache hold exactly `tokens`, reusing the common prefix; returns reused count."""
        reused = self.common_prefix(tokens)
        self.truncate(reused)
        if reused < len(tokens):
            self.decode(tokens[reused:], logits="none")
        return reused

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
            rc = lc.llama_decode(self.handle, batch)
            if rc != 0:
                # on failure llama.cpp may keep some ubatches: drop them to stay in sync
                lc.llama_memory_seq_rm(self._memory, 0, len(self._tokens), -1)
                raise DecodeError(
                    f"llama_decode failed with code {rc} after {len(self._tokens)} tokens"
                    + (": the KV cache is full, raise --ctx-size" if rc == 1 else "")
                )
            self._tokens.extend(chunk)
            if n_out:
                ptr = lc.llama_get_logits(self.handle)
                rows.append(np.ctypeslib.as_array(ptr, shape=(n_out, self.model.n_vocab)).copy())
        if not rows:
            return np.empty((0, self.model.n_vocab), dtype=np.float32)
        stacked: Logits = rows[0] if len(rows) == 1 else np.concatenate(rows)
        return stacked
