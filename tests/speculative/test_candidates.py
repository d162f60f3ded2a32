"""The candidate chain against the dense float64 reference: the same kept set, the same numbers.

`sampling.run_chain` (float64 over the whole vocabulary, a full sort for top-p) is the oracle;
`candidates.run` must keep exactly its tokens, with its logits, on every row it decides, and
hand the rest back (`UndecidedError`). Rows: peaked like a language model's, flat, tied,
with -inf entries (a constraint), with penalties, over llama.cpp's default settings and chains.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from localspec.speculative import candidates
from localspec.speculative.candidates import UndecidedError
from localspec.speculative.sampling import SamplingSettings, distribution, run_chain

N_VOCAB = 5000


def _peaked(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    row = rng.normal(0.0, 2.0, N_VOCAB)
    row[rng.choice(N_VOCAB, 20, replace=False)] += rng.uniform(5, 15, 20)
    return row.astype(np.float32)


def _flat(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    return rng.normal(0.0, 0.3, N_VOCAB).astype(np.float32)


def _tied(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    # few distinct values: ties everywhere, across every cut
    return rng.integers(-4, 4, N_VOCAB).astype(np.float32)


def _masked(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    row = _peaked(rng)
    row[rng.random(N_VOCAB) < 0.7] = -np.inf
    return row


def _constrained(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    # a grammar's mask: a handful of tokens allowed, fewer than a top-k of 40
    row = np.full(N_VOCAB, -np.inf, dtype=np.float32)
    allowed = rng.choice(N_VOCAB, 12, replace=False)
    row[allowed] = rng.normal(0.0, 2.0, 12)
    return row


def _near_zero(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    # distinct float32 values whose float64 exponentials coincide
    return (rng.normal(0.0, 1e-30, N_VOCAB)).astype(np.float32)


ROWS = [_peaked, _flat, _tied, _masked, _constrained, _near_zero]
SETTINGS = [
    SamplingSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    SamplingSettings(temperature=1.0, top_p=0.9),
    SamplingSettings(temperature=1.0, top_p=0.5),
    SamplingSettings(temperature=1.0, top_p=0.999),
    SamplingSettings(temperature=0.7, min_p=0.1),
    SamplingSettings(temperature=1.0, top_k=7),
    SamplingSettings(temperature=0.0, top_k=3, top_p=0.8),
    SamplingSettings(temperature=1.2, top_p=0.95, repeat_penalty=1.3, frequency_penalty=0.5),
    SamplingSettings(temperature=1.0, top_p=0.9, samplers=("top_p", "penalties", "top_k")),
    SamplingSettings(
        temperature=0.9, min_p=0.01, top_p=0.9, samplers=("min_p", "temperature", "top_p")
    ),
]


def _check(row: npt.NDArray[np.float32], history: list[int], settings: SamplingSettings) -> bool:
    """Whether the candidate chain decided the row; where it did, it agrees with the oracle."""
    z, keep = run_chain(row, history, settings, settings.chain)
    try:
        kept = candidates.run(row, history, settings, settings.chain)
    except UndecidedError:
        return False
    assert kept.ids is not None
    # the same tokens of finite logit (the reference may keep -inf ones, at probability 0)
    live = keep & np.isfinite(z)
    mine = np.isfinite(kept.z)
    np.testing.assert_array_equal(kept.ids[mine], np.flatnonzero(live))
    np.testing.assert_array_equal(kept.z[mine], z[live])
    return True


CASES = list(itertools.product(range(len(ROWS)), range(len(SETTINGS))))


@pytest.mark.parametrize(("r", "s"), CASES)
def test_candidates_keep_what_the_reference_keeps(r: int, s: int) -> None:
    make, settings = ROWS[r], SETTINGS[s]
    rng = np.random.default_rng(1000 * r + s)
    decided = 0
    for _ in range(12):
        row = make(rng)
        history = [int(t) for t in rng.integers(0, N_VOCAB, 80)]
        decided += _check(row, history, settings)
    if make in (_peaked, _masked, _constrained):
        assert decided == 12  # a language model's rows never need the reference


def test_every_kind_of_row_is_decided_by_the_candidates_somewhere() -> None:
    """The comparison above checks only rows the candidates decide: each kind of row must
    give it some, or its test would compare nothing."""
    for r, make in enumerate(ROWS):
        rng = np.random.default_rng(r)
        decided = 0
        for settings in SETTINGS:
            for _ in range(4):
                row = make(rng)
                history = [int(t) for t in rng.integers(0, N_VOCAB, 80)]
                decided += _check(row, history, settings)
        assert decided > 0, make.__name__


def test_distribution_matches_reference_probabilities() -> None:
    rng = np.random.default_rng(7)
    settings = SamplingSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    for make in ROWS:
        row = make(rng)
        z, keep = run_chain(row, [], settings, settings.chain)
        shifted = np.exp(np.where(keep, z, -np.inf) - z[keep].max())
        np.testing.assert_allclose(
            distribution(row, [], settings), shifted / shifted.sum(), rtol=0, atol=1e-12
        )


def test_cut_on_a_knife_edge_goes_to_the_reference() -> None:
    row = np.log(np.array([0.5, 0.3, 0.2] + [1e-30] * 997)).astype(np.float32)
    p = np.exp(row.astype(np.float64))
    p /= p.sum()
    edge = SamplingSettings(temperature=1.0, top_p=float(p[0] + p[1]))
    with pytest.raises(UndecidedError):
        candidates.run(row, [], edge, edge.chain)
    _, keep = run_chain(row, [], edge, edge.chain)
    np.testing.assert_array_equal(distribution(row, [], edge) > 0, keep)


def test_whole_vocabulary_top_p_examines_more_when_the_row_is_flat() -> None:
    row = np.random.default_rng(3).normal(0.0, 0.01, 40_000).astype(np.float32)
    settings = SamplingSettings(temperature=1.0, top_p=0.3)
    kept = candidates.run(row, [], settings, settings.chain)
    _, keep = run_chain(row, [], settings, settings.chain)
    np.testing.assert_array_equal(kept.ids, np.flatnonzero(keep))
    assert kept.ids is not None and kept.ids.size > 4096
