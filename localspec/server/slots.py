"""Several sequences on one pair of models: a server's slots.

One user runs several clients at once: an editor completing at every pause in typing, a
chat answer streaming, an agent's turn. Each gets a slot, which keeps what that client's
next request will reuse: the target's KV cache, the draft model's, and the n-gram index
over the slot's sequence. The contexts hold one slot's caches at a time and the others wait
in host memory (`Runtime.hold_caches` and `resume_caches`: ~30 KB a token on the default target,
copied in milliseconds per thousand tokens). Kept as KV cells instead, they would slow every other
slot's decodes (llama.cpp's attention walks every cell in use, masked or not: ~10% with
2,500 idle cells, see `localspec.llama.parked`) and take the context length from them.

Which slot a request gets (`Slots.choose`), from the free ones (a slot is busy while its
generation runs, or waits for its turn after an editor's request):
1. the slot it asks for (`id_slot`, taken modulo the count as llama-server does), when free,
   unless it holds nothing of the prompt and another slot does: llama.vim asks for slot 0 on
   every request, and sent there after a chat had it, its prompt would be processed again
   while its cache waited in another slot;
2. the slot whose cache holds the most of the prompt, if at least a tenth of it (llama-server's
   rule, with its default `--slot-prompt-similarity` of 0.1), counting the common prefix and
   the chunks its prefill would shift into place (`--cache-reuse`);
3. the slot that serves the same route (the one holding the most of the prompt, then the
   most recent): a conversation's first turn shares little with anything, and taking the
   chat's slot keeps the editor's cache;
4. the least recently used one (not the one sharing a few tokens: with a model that starts
   every prompt with a BOS token, every slot shares one).
With one slot this is today's single sequence: every request goes to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.llama.prompt_cache import common_prefix
from localspec.llama.reuse import chunk_moves
from localspec.loading import HeldCaches
from localspec.runtime import Runtime
from localspec.speculative.ngram import NGramProposer

SIMILARITY = 0.1
"""The least share of a prompt a slot's cache must hold in front to be chosen for it."""


@dataclass(eq=False)
class Slot:
    """One client's sequence: its caches while another slot holds the contexts (`held`),
    its n-gram index, and what the scheduler needs to know about it."""

    id: int
    ngram: NGramProposer
    held: HeldCaches = field(default_factory=HeldCaches)
    route: str | None = None  # the route of its last request
    used: int = 0  # when it was last chosen (a counter: larger is more recent)
    busy: bool = False  # a generation holds it, running or waiting for its turn
    requests: int = 0  # requests it served since the start


class Slots:
    """`count` slots over the runtime's contexts; `activate` gives one of them the contexts."""

    def __init__(self, runtime: Runtime, count: int) -> None:
        if count < 1:
            raise ValueError("a server needs at least one slot")
        self.runtime = runtime
        # the session's n-gram cache and the suffix store learn from every slot
        cache = runtime.ngram.cache
        # slot 0 keeps the runtime's own proposer: one slot is exactly the runtime alone
        proposers = [runtime.ngram] + [
            NGramProposer(
                runtime.ngram.index.n_min, runtime.ngram.index.n_max, cache, runtime.ngram.store
            )
            for _ in range(count - 1)
        ]
        self.slots = [Slot(i, proposer) for i, proposer in enumerate(proposers)]
        self.active = self.slots[0]
        self._clock = 0
        self.exchanges = 0  # how often the contexts changed hands (a cost `/slots` shows)

    def __len__(self) -> int:
        return len(self.slots)

    def tokens(self, slot: Slot) -> Sequence[int]:
        """What `slot`'s target cache holds."""
        if slot is self.active:
            return self.runtime.cached_sequence()
        return slot.held.tokens

    def choose(
        self, prompt: Sequence[int], route: str, wanted: int = -1, reuse_min: int | None = None
    ) -> Slot | None:
        """The free slot for a request (see the module's docstring); None when all are busy.
        `reuse_min` is the request's chunk reuse (None: the runtime's `--cache-reuse`)."""
        free = [slot for slot in self.slots if not slot.busy]
        if not free:
            return None
        reuse = self.runtime.settings.cache_reuse if reuse_min is None else reuse_min
        shared = {slot.id: self._reusable(slot, prompt, reuse) for slot in free}
        similar = [slot for slot in free if _similar(shared[slot.id], prompt)]
        asked = self.slots[wanted % len(self.slots)] if wanted >= 0 else None
        if asked is not None and not asked.busy and (asked in similar or not similar):
            return self._take(asked, route)
        same_route = [slot for slot in free if slot.route == route]
        for candidates in (similar, same_route):
            if candidates:
                best = max(candidates, key=lambda slot: (shared[slot.id], slot.used))
                return self._take(best, route)
        return self._take(min(free, key=lambda slot: slot.used), route)

    def _reusable(self, slot: Slot, prompt: Sequence[int], reuse_min: int) -> int:
        """How much of `prompt` `slot`'s cache would serve: the common prefix and the
        chunks its prefill would shift into place (a warm-up's ring, the window after a
        cursor jump), as `LlamaContext.prefill` reuses them."""
        tokens = self.tokens(slot)
        shared = common_prefix(np.asarray(tokens, dtype=np.int32), prompt)
        if reuse_min > 0 and shared < len(prompt) and self.runtime.status.can_shift:
            shared += sum(move.length for move in chunk_moves(tokens, prompt, shared, reuse_min))
        return shared

    def _take(self, slot: Slot, route: str) -> Slot:
        self._clock += 1
        slot.used, slot.busy, slot.route = self._clock, True, route
        slot.requests += 1
        return slot

    def release(self, slot: Slot) -> None:
        slot.busy = False

    def activate(self, slot: Slot) -> None:
        """Give `slot` the contexts: the active slot's caches go to host memory and
        `slot`'s come back (nothing happens when it is active already). A state that does
        not restore raises `DecodeError` with `slot`'s cache left empty; the other slot's
        caches are saved by then."""
        if slot is self.active:
            return
        self.active.held = self.runtime.hold_caches()
        self.active = slot
        self.exchanges += 1
        restore, slot.held = slot.held, HeldCaches()
        self.runtime.resume_caches(restore)

    def describe(self) -> list[dict[str, object]]:
        """The slots as `/slots` shows them (llama-server's fields where they exist)."""
        n_ctx = self.runtime.n_ctx
        return [
            {
                "id": slot.id,
                "n_ctx": n_ctx,
                "is_processing": slot.busy,
                # llama-server's: whether requests there may speculate (n-gram drafts need
                # no draft model, so always)
                "speculative": True,
                "n_cached": len(self.tokens(slot)),
                "route": slot.route,
                "requests": slot.requests,
                # host memory its caches take while another slot holds the contexts
                "saved_bytes": slot.held.size,
            }
            for slot in self.slots
        ]


def _similar(shared: int, prompt: Sequence[int]) -> bool:
    return shared > 0 and shared >= SIMILARITY * len(prompt)
