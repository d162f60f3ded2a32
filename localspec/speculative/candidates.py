"""The sampling chain on the few tokens that can survive it, not on the whole vocabulary.

`sampling.run_chain` is the reference: float64 over all 152k logits, a full sort for top-p.
This module computes the same kept set without the sort and mostly in float32 (the same
tokens of finite logit: where a top-k reaches past the last of them, the reference also
keeps -inf ones, at probability 0):

* top-k and greedy are comparisons: an `np.partition` of the float32 row finds the k-th
  value, a mask takes every token at or above it (ties included), and the reference's float64
  arithmetic then runs on those candidates alone, so the result is bit for bit the same.
* min-p keeps p_i >= min_p * p_max, that is exp(z_i - z_max) >= min_p: a threshold on the
  logits, no normaliser, no sort.
* top-p needs the normaliser over the whole vocabulary. The top M tokens (M = 256, then
  more) get exact float64 terms; the rest of the vocabulary is summed in float32 with a
  rigorous error bound. The cut is accepted only where every decision it rests on clears
  that bound (and the kept tokens clear the unexamined ones) by a margin.

Where a decision does not clear its margin (a cumulative mass within about 1e-5 of top_p, a
probability within 1e-9 of the min-p threshold, two candidates' probabilities within 1e-9 of
each other across a cut), or the row has a NaN or no finite logit, `UndecidedError` hands the row
to the reference, whose answer is the answer by definition. The tests compare both on many
rows, ties, flat rows and -inf entries included.

Penalties and temperature are element-wise: they are replayed, in the chain's order, on just
the tokens whose values are needed (`Candidates.values`), giving the reference's numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from localspec.speculative.infill_sampler import InfillVocab, infill_keep

if TYPE_CHECKING:
    from localspec.speculative.sampling_settings import SamplingSettings

FloatArray = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Ids = npt.NDArray[np.intp]
Op = Callable[[Ids, F64], F64]

PREFILTER = (256, 4096, 32768)
"""How many tokens top-p examines exactly, tried in turn until they hold top_p's mass."""
GUARD = 1e-9
"""Relative margin a float64 decision must clear (the reference's rounding is ~1e-12)."""
EPS32 = 2.0**-24
# per rest term: |dx| <= |x| eps from float32 rounding of x = z - m, exp within 4 ulp; terms
# with x < -40 hold < e^-40 each (1e-10 in all); the rest have |x| + 8 <= 48; pairwise float32
# summation adds at most 40 eps. So |R32 - R| <= 88 eps R32 + 1e-10 (S >= 1: the max term is 1).
REST_EPS = 88 * EPS32 * 1.01
REST_FLOOR = 1e-10


class UndecidedError(Exception):
    """A decision too close to call here: the dense reference chain decides the row."""


Z = TypeVar("Z", FloatArray, F64)


def penalised(values: Z, counts: npt.NDArray[np.int64], settings: SamplingSettings) -> Z:
    """llama.cpp's penalties on the logits of tokens seen `counts` times (the one formula both
    `sampling.apply_penalties` and the candidates use, so their numbers are identical)."""
    rp = settings.repeat_penalty
    out: Z = np.where(values > 0, values / rp, values * rp)
    out -= counts * settings.frequency_penalty + settings.presence_penalty
    return out


def window(
    history: Sequence[int], settings: SamplingSettings, n_vocab: int
) -> tuple[Ids, npt.NDArray[np.int64]]:
    """The tokens the penalties touch, ascending, and how often each was seen."""
    recent = np.asarray(history[-settings.repeat_last_n :], dtype=np.int64)
    ids, counts = np.unique(recent[recent < n_vocab], return_counts=True)
    return ids.astype(np.intp), counts


def _penalties(history: Sequence[int], settings: SamplingSettings, n_vocab: int) -> Op:
    """The penalties stage as an element-wise op on any tokens' values."""
    seen, counts = window(history, settings, n_vocab)

    def op(ids: Ids, values: F64) -> F64:
        at = np.minimum(np.searchsorted(seen, ids), max(seen.size - 1, 0))
        hit = seen[at] == ids if seen.size else np.zeros(ids.shape, dtype=bool)
        out = values.copy()
        out[hit] = penalised(values[hit], counts[at[hit]], settings)
        return out

    return op


def _divide(temperature: float) -> Op:
    def op(_ids: Ids, values: F64) -> F64:
        out: F64 = values / temperature
        return out

    return op


class Candidates:
    """The chain's state: the untouched float32 row, the element-wise ops applied so far,
    and the candidate tokens (None: still the whole vocabulary) with their current logits.

    While the whole vocabulary is a candidate only penalties may have been applied, so the
    row is exact everywhere but at `touched` (the penalised tokens)."""

    def __init__(self, row: FloatArray) -> None:
        self.row = row
        self.n = row.shape[0]
        self.ops: list[Op] = []
        self.touched: Ids = np.empty(0, dtype=np.intp)
        self.ids: Ids | None = None
        self.z: F64 = np.empty(0)
        top = float(row.max()) if self.n else math.nan
        if not math.isfinite(top):  # NaN, +inf, or nothing finite: the reference's business
            raise UndecidedError

    def values(self, ids: Ids) -> F64:
        """The reference's current logits at `ids` (the ops replayed on just those)."""
        out = self.row[ids].astype(np.float64)
        for op in self.ops:
            out = op(ids, out)
        return out

    def narrow(self, ids: Ids, z: F64 | None = None) -> None:
        self.ids = ids
        self.z = self.values(ids) if z is None else z

    def work(self) -> FloatArray:
        """The row with the penalised tokens out of the way (they are always candidates)."""
        if not self.touched.size:
            return self.row
        out = self.row.copy()
        out[self.touched] = -np.inf
        return out

    def above(self, work: FloatArray, threshold: np.float32) -> Ids:
        """Every token at or above `threshold` in `work`, and the penalised ones. A -inf
        threshold (fewer finite tokens than a top-k) takes the finite ones: the reference
        keeps the -inf ones too, at probability 0, which no later stage or draw can change."""
        found = np.flatnonzero(work > threshold if threshold == -np.inf else work >= threshold)
        return np.union1d(found, self.touched) if self.touched.size else found

    def penalties(self, history: Sequence[int], settings: SamplingSettings) -> None:
        op = _penalties(history, settings, self.n)
        self.ops.append(op)
        if self.ids is None:
            self.touched = np.union1d(self.touched, window(history, settings, self.n)[0])
        else:
            self.z = op(self.ids, self.z)

    def temperature(self, temperature: float) -> None:
        if temperature == 0.0:
            self.greedy()
        elif self.ids is None:
            raise UndecidedError  # a scaled whole row: the reference does it in float64
        else:
            self.ops.append(_divide(temperature))
            self.z = self.z / temperature

    def greedy(self) -> None:
        """Keep the first token with the largest logit (the reference's argmax)."""
        if self.ids is None:
            work = self.work()
            best = np.intp(np.argmax(work))
            self.narrow(np.union1d(np.array([best], dtype=np.intp), self.touched))
        assert self.ids is not None
        if not np.isfinite(self.z.max()):
            raise UndecidedError
        at = int(np.argmax(self.z))
        self.narrow(self.ids[at : at + 1], self.z[at : at + 1])

    def top_k(self, k: int) -> None:
        if self.ids is None:
            if not 0 < k < self.n:
                return
            work = self.work()
            self.narrow(self.above(work, kth_largest(work, k)))
        assert self.ids is not None
        if 0 < k < self.ids.size:
            kth = np.partition(self.z, -k)[-k]
            self._keep(self.z >= kth)

    def _keep(self, mask: npt.NDArray[np.bool_]) -> None:
        assert self.ids is not None
        self.narrow(self.ids[mask], self.z[mask])

    def min_p(self, min_p: float) -> None:
        if min_p <= 0.0:
            return
        if self.ids is None:
            work = self.work()
            top = max(float(work.max()), float(self.values(self.touched).max(initial=-np.inf)))
            self.narrow(self.above(work, _float32_below(top + math.log(min_p) - 1e-3)))
        e = _shifted(self.z)
        if np.any(np.abs(e - min_p) <= GUARD * min_p):
            raise UndecidedError
        self._keep(e >= min_p)

    def top_p(self, top_p: float) -> None:
        if top_p >= 1.0:
            return
        if self.ids is None:
            self._top_p_whole(top_p)
            return
        e = _shifted(self.z)
        cut = _cut(e, float(e.sum()), top_p, GUARD)
        if cut is not None:  # None: the mass never reaches top_p, and all are kept
            mask = np.zeros(e.size, dtype=bool)
            mask[cut] = True
            self._keep(mask)

    def _top_p_whole(self, top_p: float) -> None:
        """top-p over the whole vocabulary: exact terms for the top M, a bounded rest."""
        work = self.work()
        sizes = [m for m in PREFILTER if m < self.n]
        at = 0
        while at < len(sizes):
            floor = kth_largest(work, sizes[at])
            ids = self.above(work, floor)
            z = self.values(ids)
            top = float(z.max())
            e = np.exp(z - top)
            rest, bound = _rest(work, ids, top)
            total = float(e.sum()) + rest
            margin = 2 * (bound + 1e-12 * total) / total + GUARD
            outside = math.exp(float(floor) - top)
            cut = _cut(e, total, top_p, margin, outside)
            if cut is not None:
                keep = np.sort(cut)
                self.narrow(ids[keep], z[keep])
                return
            # skip the sizes whose extra tokens, each below `outside`, cannot make up the mass
            held = float(e.sum()) / total
            at += 1
            while at < len(sizes) and held + (sizes[at] - ids.size) * outside / total < top_p:
                at += 1
        raise UndecidedError

    def infill(self, vocab: InfillVocab) -> None:
        if self.ids is None:
            raise UndecidedError  # a whole-vocabulary infill: rare, and the reference has it
        ids = self.ids

        def finite(token: int) -> bool:
            return bool(np.isfinite(self.values(np.array([token], dtype=np.intp))[0]))

        result = infill_keep(ids, self.z, vocab, self.n, finite)
        if result is None:
            return
        kept, ended = result
        if ended:
            self.narrow(kept, np.ones(1))
        else:
            self._keep(np.isin(ids, kept))


def kth_largest(row: FloatArray, k: int) -> np.float32:
    """The k-th largest value of `row` (-inf where fewer than k are finite), as
    `np.partition(row, n - k)[n - k]` gives it, but partitioning the finite values only: on a
    row a constraint masked to -inf almost everywhere numpy's partition degenerates (top-k 40
    took 39 ms a token on Qwen's 151,936-token row, against 1.1 ms unmasked)."""
    finite = row[row > -np.inf]
    if finite.size < k:
        return np.float32(-np.inf)
    return np.float32(np.partition(finite, finite.size - k)[finite.size - k])


def _float32_below(value: float) -> np.float32:
    """The largest float32 not above `value` (a threshold that never drops a candidate)."""
    out = np.float32(value)
    return np.nextafter(out, np.float32(-np.inf)) if float(out) > value else out


def _shifted(z: F64) -> F64:
    top = z.max()
    if not np.isfinite(top):
        raise UndecidedError
    out: F64 = np.exp(z - top)
    return out


def _rest(work: FloatArray, ids: Ids, top: float) -> tuple[float, float]:
    """The normaliser's terms outside `ids`, in float32, and a bound on their error."""
    top32 = np.float32(top)
    terms = np.exp(work - top32)
    terms[ids] = 0.0
    rest32 = float(terms.sum())
    rest = rest32 * math.exp(float(top32) - top)
    return rest, REST_EPS * rest + REST_FLOOR


def _cut(e: F64, total: float, top_p: float, margin: float, outside: float = 0.0) -> Ids | None:
    """The positions (into `e`) the reference's top-p keeps, or None where the candidates
    lack the mass; raises `UndecidedError` where a decision is within `margin` of flipping."""
    order = np.argsort(-e, kind="stable")
    cumulative = np.cumsum(e[order]) / total
    i = int(np.searchsorted(cumulative, top_p))
    if i == e.size or cumulative[i] < top_p + margin:
        if i < e.size or cumulative[-1] >= top_p - margin:
            raise UndecidedError
        return None
    if i > 0 and cumulative[i - 1] >= top_p - margin:
        raise UndecidedError
    last = e[order[i]]
    if last <= outside * (1 + GUARD):
        return None  # the cut reaches tokens not examined: examine more
    near = e[np.abs(e - last) <= GUARD * last]
    if near.max() != near.min():
        raise UndecidedError  # probabilities an ulp apart across the cut: order not certain
    return order[: i + 1]


def run(
    logits: FloatArray,
    history: Sequence[int],
    settings: SamplingSettings,
    chain: Sequence[str],
    infill: InfillVocab | None = None,
) -> Candidates:
    """`chain`'s stages on `logits`, as `sampling.run_chain` applies them; raises `UndecidedError`
    where the reference must decide (including a chain that leaves the whole vocabulary)."""
    c = Candidates(logits)
    for stage in chain:
        if stage == "penalties" and settings.penalised and history:
            c.penalties(history, settings)
        elif stage == "top_k":
            c.top_k(settings.top_k)
        elif stage == "top_p":
            c.top_p(settings.top_p)
        elif stage == "min_p":
            c.min_p(settings.min_p)
        elif stage == "temperature":
            c.temperature(settings.temperature)
        elif stage == "infill":
            if infill is None:
                raise UndecidedError  # the reference refuses it, with the message
            c.infill(infill)
    if c.ids is None:
        raise UndecidedError  # nothing narrowed: the reference's dense softmax is as cheap
    return c
