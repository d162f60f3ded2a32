"""`measure_reuse_numerics` on the tiny f32 model: which requests a shift affects, and the
exact ones staying within kernel rounding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec import Runtime, RuntimeSettings
from localspec.bench.reuse_numerics import measure_reuse_numerics
from tests.llama.test_context import F32_TOLERANCE

N = 32


# The plain attention path (flash attention off: the default on a CPU at long contexts)
# rounds a prompt's scores differently by how its batches are cut, so an exact reuse and a
# cold prefill of the same prompt differ more than with flash attention: measured 8.4e-3 on
# the tiny model.
PLAIN_ATTENTION_TOLERANCE = 2e-2


@pytest.fixture(scope="module", params=["off", "on"])
def runtime(tiny_target: Path, request: pytest.FixtureRequest) -> Iterator[Runtime]:
    settings = RuntimeSettings(
        target=tiny_target, n_ctx=1024, n_threads=1, flash_attn=request.param
    )
    with Runtime(settings) as loaded:
        yield loaded


def _exact_tolerance(runtime: Runtime) -> float:
    plain = runtime.models.target_context.flash_attn is False
    return PLAIN_ATTENTION_TOLERANCE if plain else F32_TOLERANCE


def _tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(20, 250, n)]


PREFIX, GAP, CHUNK = _tokens(1, 10), _tokens(2, 20), _tokens(3, 3 * N)
PROMPTS = [
    PREFIX + GAP + CHUNK + _tokens(4, 6),
    PREFIX + CHUNK + _tokens(5, 6),  # the chunk shifted
    PREFIX + CHUNK + _tokens(5, 6) + _tokens(6, 4),  # extends it: still carries the shift
    _tokens(7, 50),  # shares nothing: exact
    _tokens(7, 50) + _tokens(8, 3),  # a prefix reuse of an exact cache: exact
]


def test_a_shift_and_what_reuses_it_are_affected_the_rest_is_exact(runtime: Runtime) -> None:
    numerics = measure_reuse_numerics(runtime, PROMPTS, cache_reuse=N, greedy_tokens=8)
    assert (numerics.requests, numerics.shifted_requests, numerics.affected_requests) == (5, 1, 2)
    assert numerics.shifted_tokens == len(CHUNK)
    assert numerics.greedy_compared == 2 and numerics.greedy_agree <= numerics.first_token_agree
    assert numerics.max_logit_diff > 10 * F32_TOLERANCE  # what the context's tests measure
    assert 0 < numerics.median_logit_diff <= numerics.max_logit_diff
    assert numerics.exact_max_logit_diff < _exact_tolerance(runtime)
    assert numerics.logit_std > 1.0
    rows = numerics.rows()
    assert all(len(row) == 2 for row in rows) and ("requests", "5") in rows


def test_without_chunk_reuse_nothing_is_affected(runtime: Runtime) -> None:
    numerics = measure_reuse_numerics(runtime, PROMPTS, cache_reuse=0, greedy_tokens=4)
    assert numerics.shifted_requests == numerics.affected_requests == 0
    assert numerics.greedy_compared == 0 and numerics.max_logit_diff == 0.0
    assert numerics.exact_max_logit_diff < _exact_tolerance(runtime)


def test_warm_ups_shape_the_cache_and_are_not_measured(runtime: Runtime) -> None:
    """llama.vim's ring warm-up drops the oldest chunk: the next one is shifted into place
    by the warm-up, and the completion after it reuses that shifted chunk, and takes back the
    window the warm-up left behind (parked: `localspec.llama.parked`)."""
    oldest, kept, window = _tokens(11, 10), _tokens(12, 3 * N), _tokens(13, 40)
    entered = _tokens(14, 20)
    prompts = [
        oldest + kept + window + _tokens(15, 4),
        kept + entered + [5],  # the warm-up: the ring rotated, a new chunk at its end
        kept + entered + window + _tokens(16, 4),
    ]
    numerics = measure_reuse_numerics(
        runtime, prompts, cache_reuse=N, greedy_tokens=4, warm_ups={1}
    )
    assert (numerics.requests, numerics.shifted_requests, numerics.affected_requests) == (2, 1, 1)
    assert numerics.max_logit_diff > 10 * F32_TOLERANCE  # the shifted chunk's values
