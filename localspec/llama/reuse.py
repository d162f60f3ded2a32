"""Which cached chunks a new prompt can reuse by shifting them (llama-server's `n_cache_reuse`).

Editors move text: llama.vim's prefix window starts at another line when the cursor moves,
and its ring of extra chunks drops the oldest one, so every later chunk sits earlier in the
new prompt than in the cache. After the common prefix, `chunk_moves` walks the cache as
llama-server does (tools/server/server-context.cpp): with heads at the end of the prefix in
both, if the prompt's next tokens reappear in the cache as a run of at least `min_len`, the
run is moved to the prompt's head (the cache between is dropped) and both heads pass it;
otherwise the cache head advances by one. A prompt token that starts no such run ends the
walk: the KV cache must hold the prompt's first tokens contiguously, so nothing after a new
token can be reused (the context parks what the walk leaves behind for a later prompt's walk:
`localspec.llama.parked`).

The walk is pure arithmetic on token arrays (the context applies the moves to the KV
cache). llama-server compares token by token; here each prompt head costs one vectorized
pass over the cache to find candidates, filtered by a few probe tokens of the run before
any is compared whole, so a cache of thousands of tokens is walked in well under a
millisecond even where one token value (a newline) is everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Tokens = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Move:
    """A chunk of `length` cached tokens that moves from position `source` to `dest`."""

    source: int
    dest: int
    length: int


def chunk_moves(
    cache: Sequence[int], prompt: Sequence[int], start: int, min_len: int
) -> list[Move]:
    """The moves that make `cache` hold more of `prompt`, given they share `start` tokens.

    Each move's `dest` is where the previous one ended (the first at `start`) and its
    `source` lies after the previous one's end in the cache, so applying them in order to
    a cache whose positions from `dest` on are still the old ones is always valid.
    """
    if min_len <= 0:
        return []
    cached = np.asarray(cache, dtype=np.int64)
    wanted = np.asarray(prompt, dtype=np.int64)
    moves: list[Move] = []
    head_c = head_p = start
    while head_c < len(cached) and head_p + min_len <= len(wanted):
        source = _next_run(cached, wanted, head_c, head_p, min_len)
        if source is None:
            break
        length = _match_length(cached, wanted, source, head_p)
        moves.append(Move(source, head_p, length))
        head_c, head_p = source + length, head_p + length
    return moves


def _next_run(cached: Tokens, wanted: Tokens, head_c: int, head_p: int, min_len: int) -> int | None:
    """The first cache position from `head_c` on where `wanted[head_p:head_p + min_len]`
    starts, or None."""
    last = len(cached) - min_len  # the last position a whole run fits after
    if last < head_c:
        return None
    run = wanted[head_p : head_p + min_len]
    # a candidate must agree at a few probe offsets before the whole run is compared
    probes = sorted({0, min_len - 1, min_len // 2, min_len // 4, (3 * min_len) // 4})
    window = slice(head_c, last + 1)
    found = cached[window] == run[0]
    for offset in probes[1:]:
        found &= cached[head_c + offset : last + 1 + offset] == run[offset]
    for candidate in np.flatnonzero(found):
        position = head_c + int(candidate)
        if np.array_equal(cached[position : position + min_len], run):
            return position
    return None


def _match_length(cached: Tokens, wanted: Tokens, source: int, dest: int) -> int:
    """How many tokens from `cached[source]` and `wanted[dest]` on agree."""
    n = min(len(cached) - source, len(wanted) - dest)
    differ = np.flatnonzero(cached[source : source + n] != wanted[dest : dest + n])
    return int(differ[0]) if differ.size else n
