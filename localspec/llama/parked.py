"""Cached tokens a prompt left behind, kept in the KV cache for the next prompt to take back.

llama.vim sends a warm-up request whenever a chunk enters its ring of extra context: the
ring with the new chunk, and empty prefix and suffix windows. The new chunk sits where the
cache held the window around the cursor (256 lines before it, 64 after), so the warm-up
throws that window away, and the next completion, which has it again after the new chunk,
processes it again: some 3,000 tokens, over half a minute on a CPU. llama-server does the
same: a chunk can only be shifted back to where the prompt wants it, and the window is needed
*after* the chunk that displaced it.

So where a prefill would drop at least `reuse_min` cached tokens that nothing in its prompt
reuses, `LlamaContext` parks them instead: they move to sequence 1 of the same KV cache,
which no decode reads (attention is masked by sequence), and the token list of sequence 0
stays exactly the prompt's. The next prefill's reuse walk searches the parked tokens as if
they followed the cache (`localspec.llama.reuse`), and a chunk it finds there is moved into
place like any shifted chunk: its keys re-rotated, its values the ones computed before (they
never attended to the tokens inserted before it, as a shifted chunk's attended to tokens
removed). Parked tokens are given up whenever the cells they take are needed.

Mechanics. Parked cells keep the positions they had in sequence 0: moving them there and
back would re-rotate their keys twice, and llama.cpp applies each rotation in floating
point. A chunk goes back through sequence 2, where nothing else lies at any position, so
its shift catches no other cell, and then joins sequence 0 right after its last token
(llama.cpp requires a sequence's positions to stay contiguous). The context runs with a
unified cache of three sequences: one pool of `n_ctx` cells, as with one sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp.llama_cpp as lc

N_SEQUENCES = 3
"""0 holds the prompt, 1 the parked tokens, 2 is where a chunk moves on its way back."""

_PROMPT, _PARKED, _MOVING = 0, 1, 2


class ParkedTokens:
    """The tokens sequence 1 holds: one run, contiguous from position `start`."""

    def __init__(self, memory: lc.llama_memory_t) -> None:
        self._memory = memory
        self.start = 0
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def park(self, tokens: Sequence[int], start: int) -> None:
        """Move sequence 0's cells from position `start` on (they hold `tokens`) here,
        replacing what was parked: the newest left-behind tokens are the likeliest wanted."""
        self.drop()
        lc.llama_memory_seq_cp(self._memory, _PROMPT, _PARKED, start, -1)
        lc.llama_memory_seq_rm(self._memory, _PROMPT, start, -1)
        self.start, self.tokens = start, list(tokens)

    def drop(self) -> None:
        """Give the parked cells up."""
        if self.tokens:
            lc.llama_memory_seq_rm(self._memory, _PARKED, -1, -1)
        self.tokens = []

    def forget(self) -> None:
        """The cells are gone already (the whole cache was cleared or replaced)."""
        self.tokens = []

    def take(self, index: int, length: int, dest: int) -> None:
        """Move `tokens[index:index + length]` into sequence 0 at `dest`, where sequence 0
        ends. The parked tokens before them go: the reuse walk never comes back for them."""
        first = self.start + index
        end = first + length
        if index > 0:
            lc.llama_memory_seq_rm(self._memory, _PARKED, self.start, first)
        lc.llama_memory_seq_cp(self._memory, _PARKED, _MOVING, first, end)
        lc.llama_memory_seq_rm(self._memory, _PARKED, first, end)
        if dest != first:
            lc.llama_memory_seq_add(self._memory, _MOVING, first, end, dest - first)
        lc.llama_memory_seq_cp(self._memory, _MOVING, _PROMPT, dest, dest + length)
        lc.llama_memory_seq_rm(self._memory, _MOVING, -1, -1)
        self.start, self.tokens = end, self.tokens[index + length :]
