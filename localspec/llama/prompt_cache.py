"""KV states of earlier prompts kept in host memory, as llama-server's `--cache-ram` keeps them.

The KV cache holds one prompt. An editor's requests jump (the cursor goes to another file,
a chat switches conversations), and a request that shares little with the cache throws most
of it away; when the user comes back, the old prompt would be processed again, at tens of
tokens a second on a CPU. So before a request discards most of the cache, the context saves
its state here, and a later request that shares more with a saved state than with the cache
restores that state instead (`LlamaContext.prefill`).

This module is pure bookkeeping: which states to keep, which one a prompt should restore.
Taking and restoring a state (the bytes of llama.cpp's sequence state) is `LlamaContext`'s,
the only place that calls llama.cpp. The rules are llama-server's (tools/server/
server-task.cpp, `server_prompt_cache`): a state already covered by a saved one is not saved
again, saved states the new one extends are dropped, the oldest go first over the byte
limit, and a restore must keep at least a quarter of the saved prompt, so that a large state
is not traded for a short common prefix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

_log = logging.getLogger(__name__)

Tokens = npt.NDArray[np.int32]

MIN_SAVED_TOKENS = 64
"""Fewer cached tokens than this are cheaper to process again than to keep (a second or so)."""

MIN_KEEP = 0.25
"""A saved state is restored only if the prompt keeps at least this fraction of it."""

RAM_SHARE = 4
"""The cache never takes more than 1/RAM_SHARE of the machine's memory, whatever is asked."""


@dataclass(frozen=True, eq=False)
class SavedState:
    """The tokens a context's KV cache held and the bytes of that cache (sequence 0)."""

    tokens: Tokens
    data: bytearray

    @property
    def size(self) -> int:
        return len(self.data)


class StateSource(Protocol):
    """What the cache needs of a context (`LlamaContext` is one): its tokens, and a copy of
    its state, taken only when the state is worth keeping. Named here, not imported, because
    the context imports this module."""

    @property
    def tokens(self) -> Sequence[int]: ...

    def save_state(self) -> SavedState: ...


def limit_bytes(cache_ram_mib: int) -> int:
    """`cache_ram_mib` in bytes, capped at a quarter of the machine's RAM (0: no cache).

    A laptop's memory also holds the models, the editor and a browser: a cap asked for in
    MiB must not become the reason the machine swaps.
    """
    wanted = max(0, cache_ram_mib) * 2**20
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # not a POSIX system: trust the setting
        return wanted
    return min(wanted, ram // RAM_SHARE)


def common_prefix(a: Tokens, b: Sequence[int] | Tokens) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != np.asarray(b[:n], dtype=np.int32))
    return int(differ[0]) if differ.size else n


class PromptCache:
    """Saved states, oldest first, holding at most `limit_bytes` of state data."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._entries: list[SavedState] = []

    @property
    def entries(self) -> Sequence[SavedState]:
        return tuple(self._entries)

    @property
    def bytes(self) -> int:
        return sum(entry.size for entry in self._entries)

    def save(self, context: StateSource) -> bool:
        """Keep a copy of `context`'s state; False where it is not worth one (too short,
        already covered by a saved state, or larger than the whole limit)."""
        tokens = context.tokens
        if len(tokens) < MIN_SAVED_TOKENS:
            return False
        if any(common_prefix(entry.tokens, tokens) == len(tokens) for entry in self._entries):
            return False
        state = context.save_state()
        if state.size > self.limit_bytes:
            _log.debug("a %d-byte prompt state exceeds the prompt cache", state.size)
            return False
        self._entries = [
            entry
            for entry in self._entries
            if common_prefix(entry.tokens, tokens) < len(entry.tokens)
        ]
        while self._entries and self.bytes + state.size > self.limit_bytes:
            del self._entries[0]
        self._entries.append(state)
        return True

    def best(self, tokens: Sequence[int], current_reuse: int) -> SavedState | None:
        """The saved state whose prompt shares the longest prefix with `tokens`, if that is
        longer than `current_reuse` (what the cache offers) and keeps a quarter of it.

        The state is taken out of the cache: it is about to become the context's, and is
        saved again when a later request leaves it."""
        best_at, best_reuse = -1, current_reuse
        for at, entry in enumerate(self._entries):
            reuse = common_prefix(entry.tokens, tokens)
            if reuse > best_reuse and reuse >= MIN_KEEP * len(entry.tokens):
                best_at, best_reuse = at, reuse
        return self._entries.pop(best_at) if best_at >= 0 else None
