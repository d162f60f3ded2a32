"""Cached tokens a prompt left behind, kept for a later prompt to take back.

llama.vim sends a warm-up request whenever a chunk enters its ring of extra context: the
ring with the new chunk, and empty prefix and suffix windows. The new chunk sits where the
cache held the window around the cursor (256 lines before it, 64 after), so the warm-up
throws that window away, and the next completion, which has it again after the new chunk,
processes it again: some 3,000 tokens, over half a minute on a CPU. llama-server does the
same: a chunk can only be shifted back to where the prompt wants it, and the window is needed
*after* the chunk that displaced it.

So where a prefill would drop at least `reuse_min` cached tokens that nothing in its prompt
reuses, `PromptReuse` parks them instead, and the next prefills' reuse walk
(`localspec.llama.reuse`) searches them as if they followed the cache. A run taken back is
moved into place like any shifted chunk: its keys re-rotated, its values the ones computed
before (they never attended to the tokens inserted before it, as a shifted chunk's attended
to tokens removed).

Runs that follow *new* tokens are not taken back, though they could be (process the new
tokens, then take the run): on the llama.vim replay that took back the suffix window after
every edited line, and the answers then ignored the edit (after a typed "u", " until" again
instead of "ntil"). The suffix's values had been computed after the old line, and the model
reads them at the point it answers from. A run that follows reused tokens sits after text
the user did not just change, as a shifted chunk does.

Where parked tokens live. During the reuse walk that parks them, in sequence 1 of the KV
cache, which no decode reads (attention is masked by sequence). From then on, before the
prompt's new tokens are processed, in host memory (`stow`): llama.cpp's attention walks every
cell up to the highest one in use, masked or not, so parked cells left in the cache made
every later decode ~10% slower (measured: 75 against 82 ms/token with 2,500 parked cells
beside 1,564 cached ones), and the prefill after a cursor jump 4% slower with ~3,100 parked.
A prefill that finds a run in a stowed copy restores it into sequence 1 first (`fetch`, a
copy of the bytes: ~30 KB a token on the default target, milliseconds for thousands). One
copy is kept: the newest left-behind tokens are the likeliest wanted.

Mechanics. Parked cells keep the positions they had in sequence 0: moving them there and
back would re-rotate their keys twice, and llama.cpp applies each rotation in floating
point. A run goes back through sequence 2, where nothing else lies at any position, so its
shift catches no other cell, and then joins sequence 0 right after its last token
(llama.cpp requires a sequence's positions to stay contiguous). The context runs with a
unified cache of three sequences: one pool of `n_ctx` cells, as with one sequence (which
decodes as fast: measured within 2%).
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp.llama_cpp as lc

from localspec.llama.backend import bytes_pointer

N_SEQUENCES = 3
"""0 holds the prompt, 1 the parked tokens, 2 is where a chunk moves on its way back."""

_PROMPT, _PARKED, _MOVING = 0, 1, 2


class ParkedTokens:
    """The parked tokens: one run from position `start`, held in sequence 1 of the KV cache
    (`in_cache`) or as a host-memory copy of that sequence's state (`stowed`)."""

    def __init__(self, context: lc.llama_context_p) -> None:
        self._context = context
        self._memory = lc.llama_get_memory(context)
        self.start = 0
        self.tokens: list[int] = []
        self._stowed: bytearray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def in_cache(self) -> bool:
        return bool(self.tokens) and self._stowed is None

    @property
    def stowed_bytes(self) -> int:
        return len(self._stowed) if self._stowed is not None else 0

    def park(self, tokens: Sequence[int], start: int) -> None:
        """Move sequence 0's cells from position `start` on (they hold `tokens`) here,
        replacing what was parked."""
        self.drop()
        lc.llama_memory_seq_cp(self._memory, _PROMPT, _PARKED, start, -1)
        lc.llama_memory_seq_rm(self._memory, _PROMPT, start, -1)
        self.start, self.tokens = start, list(tokens)

    def drop(self) -> None:
        """Give the parked tokens up, cells and copy."""
        if self.in_cache:
            lc.llama_memory_seq_rm(self._memory, _PARKED, -1, -1)
        self.tokens, self._stowed = [], None

    def cells_lost(self) -> None:
        """The whole cache was cleared: parked cells are gone, a stowed copy is not."""
        if self.in_cache:
            self.tokens = []

    def stow(self) -> None:
        """Copy the parked cells to host memory and free them (see the module's docstring).
        Their keys must hold no pending shift (the prefill settles one first)."""
        if not self.in_cache:
            return
        size = lc.llama_state_seq_get_size(self._context, _PARKED)
        data = bytearray(size)
        written = lc.llama_state_seq_get_data(self._context, bytes_pointer(data), size, _PARKED)
        lc.llama_memory_seq_rm(self._memory, _PARKED, -1, -1)
        if written != size:  # no host memory for it: nothing is kept
            self.tokens = []
            return
        self._stowed = data

    def fetch(self, room: int) -> bool:
        """Put a stowed copy back into sequence 1, if `room` cells are free for it; False
        (and the parked tokens given up) where it does not fit or llama.cpp refuses it."""
        data = self._stowed
        if data is None:
            return bool(self.tokens)
        self._stowed = None
        if len(self.tokens) > room:
            self.tokens = []
            return False
        read = lc.llama_state_seq_set_data(self._context, bytes_pointer(data), len(data), _PARKED)
        held = (
            int(lc.llama_memory_seq_pos_min(self._memory, _PARKED)),
            int(lc.llama_memory_seq_pos_max(self._memory, _PARKED)),
        )
        if read != len(data) or held != (self.start, self.start + len(self.tokens) - 1):
            lc.llama_memory_seq_rm(self._memory, _PARKED, -1, -1)
            self.tokens = []
            return False
        return True

    def take(self, first: int, length: int, dest: int) -> None:
        """Move the `length` parked tokens from position `first` (the position they had in
        sequence 0, which they keep here) into sequence 0 at `dest`, where sequence 0 ends
        (`fetch` first if stowed). The parked tokens before them go: the reuse walk never
        comes back for them. By position, not by index: a walk that takes two runs found
        the second one's index before the first take dropped the tokens in front of it."""
        index = first - self.start
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
