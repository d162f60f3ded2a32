"""`RuntimeStatus`: the target context's numbers as the server reports them, read-only.

The server's handlers and its worker read what the runtime holds (`/health`'s parked tokens
and prompt progress, `/props`' prompt stores, `/v1/models`' load settings, how far a warm-up
got) through this view alone, so nothing under `localspec.server` reaches into the
context's attributes, and the context can change inside without the server following it.
What a prefill reused is not here: the call returns it (`Runtime.cache_prompt`), and a
generation's statistics hold it.
Each property reads the context when asked: a handler on another thread sees the numbers
as the worker last left them, as it always has.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.llama.context import LlamaContext


@dataclass(frozen=True)
class SavedStates:
    """A prompt store's byte limit, entries and their bytes (all 0: turned off); for the
    disk store also its `min_tokens` (`localspec.llama.prompt_store`)."""

    limit_bytes: int = 0
    entries: int = 0
    bytes: int = 0
    min_tokens: int = 0


class RuntimeStatus:
    """The target context as the server sees it (see the module's docstring)."""

    def __init__(self, context: LlamaContext) -> None:
        self._context = context

    @property
    def n_threads(self) -> int:
        return self._context.n_threads

    @property
    def piece(self) -> int:
        """The prompt tokens one llama_decode call takes (`--ubatch-size`)."""
        return self._context.piece

    @property
    def can_shift(self) -> bool:
        """Whether cached chunks can move, as chunk reuse (`--cache-reuse`) needs."""
        return self._context.can_shift

    @property
    def flash_attn(self) -> bool | None:
        """Flash attention as asked (None: llama.cpp's choice)."""
        return self._context.flash_attn

    @property
    def cached_tokens(self) -> int:
        """The tokens the KV cache holds."""
        return self._context.n_past

    @property
    def parked_tokens(self) -> int:
        """Cached tokens a prompt left behind, kept for a later one (`localspec.llama.parked`)."""
        return len(self._context.parked)

    @property
    def parked_bytes(self) -> int:
        """The host memory the parked tokens' copy takes."""
        return self._context.parked.stowed_bytes

    @property
    def prompt_progress(self) -> tuple[int, int]:
        """Prompt tokens processed, of how many ((0, 0): no prompt is being processed)."""
        return self._context.reuse.progress

    @property
    def prompt_cache(self) -> SavedStates:
        """The states kept in host memory (`serve --cache-ram`)."""
        cache = self._context.reuse.cache
        if cache is None:
            return SavedStates()
        return SavedStates(cache.limit_bytes, len(cache.entries), cache.bytes)

    @property
    def prompt_store(self) -> SavedStates:
        """The states kept on disk (`serve --cache-disk`)."""
        store = self._context.reuse.store
        if store is None:
            return SavedStates()
        return SavedStates(store.limit_bytes, len(store), store.bytes, store.min_tokens)
