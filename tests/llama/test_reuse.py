"""The chunk-reuse walk on plain token lists, against a transcription of llama-server's loop."""

from __future__ import annotations

import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.llama.reuse import Move, chunk_moves


def server_walk(cache: list[int], prompt: list[int], start: int, n: int) -> list[Move]:
    """llama-server's `n_cache_reuse` loop (tools/server/server-context.cpp), token by token."""
    moves = []
    head_c = head_p = start
    while head_c < len(cache) and head_p < len(prompt):
        n_match = 0
        while (
            head_c + n_match < len(cache)
            and head_p + n_match < len(prompt)
            and cache[head_c + n_match] == prompt[head_p + n_match]
        ):
            n_match += 1
        if n_match >= n:
            moves.append(Move(head_c, head_p, n_match))
            head_c += n_match
            head_p += n_match
        else:
            head_c += 1
    return moves


def test_a_chunk_after_a_removed_gap_moves_into_place() -> None:
    prefix, gap, chunk = [1, 2, 3], [9] * 5, list(range(10, 30))
    cache = prefix + gap + chunk + [7, 7]
    prompt = prefix + chunk + [8]
    assert chunk_moves(cache, prompt, 3, 20) == [Move(8, 3, 20)]
    assert chunk_moves(cache, prompt, 3, 21) == []  # shorter than N: recomputed
    assert chunk_moves(cache, prompt, 3, 0) == []  # 0: off


def test_every_chunk_of_a_rotated_ring_moves() -> None:
    a, b, c, d = (list(range(k * 100, k * 100 + 8)) for k in range(1, 5))
    header = [0]
    cache = header + a + b + c
    prompt = header + b + c + d  # the oldest chunk dropped, a new one appended
    assert chunk_moves(cache, prompt, 1, 4) == [Move(9, 1, 16)]
    # a new token between two cached chunks ends the walk: the cache must stay contiguous
    assert chunk_moves(cache, header + b + [5] + c, 1, 4) == [Move(9, 1, 8)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
    st.integers(1, 6),
)
def test_the_walk_is_llama_servers(cache: list[int], prompt: list[int], n: int) -> None:
    start = 0
    while start < min(len(cache), len(prompt)) and cache[start] == prompt[start]:
        start += 1
    assert chunk_moves(cache, prompt, start, n) == server_walk(cache, prompt, start, n)


def test_a_cache_full_of_one_token_is_walked_quickly() -> None:
    """The walk on a 4k-token cache of newlines costs milliseconds, not the O(cache * N)
    comparisons of a token-by-token loop (a hang guard, not a speed test)."""
    rng = random.Random(0)
    cache = [rng.choice([10, 10, 10, 32]) for _ in range(4000)]
    prompt = cache[:10] + cache[2000:]  # the run sits far into the cache
    started = time.perf_counter()
    for _ in range(20):
        chunk_moves(cache, prompt, 10, 256)
    assert time.perf_counter() - started < 30
