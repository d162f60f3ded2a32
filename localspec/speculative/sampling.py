"""Turning target or draft logits into the distribution a token is drawn from.

One `Sampler` applies the same chain on every path (plain decoding, draft-model drafting,
verification), which is what makes speculative output distributed exactly like plain output:
by default penalties -> top-k -> top-p -> min-p -> temperature, the order llama.cpp's default
chain uses. Temperature 0 means greedy: the distribution collapses to the argmax of the
penalised logits.

An explicit chain (`SamplingSettings.samplers`, llama-server's `samplers` field) applies
exactly its stages, in its order, then the draw, as llama.cpp does: a stage not listed is not
applied at all, so without a `temperature` stage the draw is at temperature 1 whatever
`temperature` says, and temperature 0 greedily takes the argmax of what the stages before it
left. The `infill` stage (llama.cpp's, for fill-in-the-middle) lives in `infill_sampler`.

Drawing a token consumes exactly one uniform number from the generator (inverse CDF), so a
sample-and-compare verification consumes the random stream exactly as plain decoding does:
with the same seed, n-gram speculation reproduces plain sampling token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from localspec.errors import UsageError
from localspec.speculative import candidates
from localspec.speculative.candidates import UndecidedError, penalised, window
from localspec.speculative.infill_sampler import InfillVocab, apply_infill
from localspec.speculative.sampling_settings import SamplingSettings

# the settings live apart (the candidate filters read them) but belong here too
__all__ = [
    "F64",
    "NEEDS_VOCABULARY",
    "FloatArray",
    "Mask",
    "Sampler",
    "SamplingSettings",
    "Z",
    "apply_penalties",
    "distribution",
    "draw",
    "greedy_token",
    "run_chain",
]

FloatArray = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
NEEDS_VOCABULARY = "the infill sampler needs the vocabulary: pass infill=InfillVocab(vocabulary)"


Z = TypeVar("Z", FloatArray, F64)


def apply_penalties(logits: Z, history: Sequence[int], settings: SamplingSettings) -> Z:
    """Penalise tokens seen in the last `repeat_last_n` tokens of `history` (returns a copy)."""
    if not settings.penalised or not history:
        return logits
    ids, counts = window(history, settings, logits.shape[0])
    out = logits.copy()
    out[ids] = penalised(out[ids], counts, settings)
    return out


def _softmax(logits: F64) -> F64:
    shifted = np.exp(logits - np.max(logits))
    probs: F64 = shifted / shifted.sum()
    return probs


def _top_k(z: F64, keep: Mask, k: int) -> Mask:
    n = int(keep.sum())
    if not 0 < k < n:
        return keep
    kth = np.partition(z if n == z.shape[0] else z[keep], -k)[-k]
    kept: Mask = keep & (z >= kth)
    return kept


def _top_p(z: F64, keep: Mask, top_p: float) -> Mask:
    if top_p >= 1.0:
        return keep
    p1 = _softmax(np.where(keep, z, -np.inf))
    order = np.argsort(-p1, kind="stable")
    cumulative = np.cumsum(p1[order])
    # keep the smallest prefix whose mass reaches top_p (always at least one token)
    cut = int(np.searchsorted(cumulative, top_p)) + 1
    top = np.zeros_like(keep)
    top[order[:cut]] = True
    kept: Mask = keep & top
    return kept


def _min_p(z: F64, keep: Mask, min_p: float) -> Mask:
    if min_p <= 0.0:
        return keep
    p1 = _softmax(np.where(keep, z, -np.inf))
    kept: Mask = keep & (p1 >= min_p * p1.max())
    return kept


def run_chain(
    logits: FloatArray,
    history: Sequence[int],
    settings: SamplingSettings,
    chain: Sequence[str],
    infill: InfillVocab | None = None,
) -> tuple[F64, Mask]:
    """The logits and the candidates left after `chain`'s stages, in order (llama.cpp's
    semantics per stage; temperature 0 keeps only the argmax of what is left).

    The reference: float64 over the whole vocabulary. `candidates` gives the same kept set
    without sorting it, and hands rows it cannot decide with certainty back to this."""
    z = logits.astype(np.float64)
    keep = np.ones(z.shape[0], dtype=bool)
    for stage in chain:
        if stage == "penalties":
            z = apply_penalties(z, history, settings)
        elif stage == "top_k":
            keep = _top_k(z, keep, settings.top_k)
        elif stage == "top_p":
            keep = _top_p(z, keep, settings.top_p)
        elif stage == "min_p":
            keep = _min_p(z, keep, settings.min_p)
        elif stage == "temperature" and settings.temperature == 0.0:
            best = int(np.argmax(np.where(keep, z, -np.inf)))
            keep = np.zeros_like(keep)
            keep[best] = True
        elif stage == "temperature":
            z = z / settings.temperature
        elif stage == "infill":
            if infill is None:
                raise UsageError(NEEDS_VOCABULARY)
            z, keep = apply_infill(z, keep, infill)
    return z, keep


def distribution(
    logits: FloatArray,
    history: Sequence[int],
    settings: SamplingSettings,
    infill: InfillVocab | None = None,
) -> F64:
    """The full probability vector the sampler draws from (zeros outside the kept set).

    Only meaningful when not greedy; greedy callers use `greedy_token`. `infill` is the
    vocabulary the `infill` stage needs, where the chain has one."""
    try:
        kept = candidates.run(logits, history, settings, settings.chain, infill)
    except UndecidedError:
        z, keep = run_chain(logits, history, settings, settings.chain, infill)
        return _softmax(np.where(keep, z, -np.inf))
    probs = np.zeros(logits.shape[0], dtype=np.float64)
    probs[kept.ids] = _softmax(kept.z)  # the reference's numbers up to summation order
    return probs


def greedy_token(
    logits: FloatArray,
    history: Sequence[int],
    settings: SamplingSettings,
    infill: InfillVocab | None = None,
) -> int:
    """What temperature 0 decodes: the argmax of what the stages before the temperature
    stage left. top_k, top_p and min_p always keep that argmax, so unless an `infill` stage
    comes first it is the argmax of the (penalised, where a penalties stage comes first)
    logits. Only settings with a temperature stage are greedy (`SamplingSettings.greedy`)."""
    chain = settings.chain
    before = chain[: chain.index("temperature")] if "temperature" in chain else chain
    if "infill" not in before:
        penalised = "penalties" in before
        return int(np.argmax(apply_penalties(logits, history, settings) if penalised else logits))
    try:
        kept = candidates.run(logits, history, settings, before, infill)
        kept.greedy()
    except UndecidedError:
        z, keep = run_chain(logits, history, settings, before, infill)
        return int(np.argmax(np.where(keep, z, -np.inf)))
    assert kept.ids is not None
    return int(kept.ids[0])


def draw(probs: npt.NDArray[np.float64], rng: np.random.Generator) -> int:
    """Inverse-CDF draw with exactly one uniform from `rng` (see the module docstring)."""
    cumulative = np.cumsum(probs)
    u = rng.random() * cumulative[-1]
    index = int(np.searchsorted(cumulative, u, side="right"))
    # guard against u landing on the final edge through rounding; skip zero-mass tails
    index = min(index, len(probs) - 1)
    while probs[index] == 0.0 and index > 0:
        index -= 1
    return index


class Sampler:
    """A `SamplingSettings` plus the random stream it draws from, for one generation, and
    the vocabulary an `infill` stage needs (the engine's, built once: no I/O here)."""

    def __init__(
        self,
        settings: SamplingSettings,
        rng: np.random.Generator,
        infill: InfillVocab | None = None,
    ) -> None:
        if "infill" in settings.chain and infill is None:
            raise UsageError(NEEDS_VOCABULARY)
        self.settings = settings
        self.rng = rng
        self.infill = infill

    def distribution(self, logits: FloatArray, history: Sequence[int]) -> F64:
        """What a token is drawn from under this chain (see `distribution`)."""
        return distribution(logits, history, self.settings, self.infill)

    def greedy_token(self, logits: FloatArray, history: Sequence[int]) -> int:
        """What temperature 0 decodes under this chain (see `greedy_token`)."""
        return greedy_token(logits, history, self.settings, self.infill)

    def pick(self, logits: FloatArray, history: Sequence[int]) -> int:
        """Decode one token the way plain decoding does."""
        if self.settings.greedy:
            return self.greedy_token(logits, history)
        return draw(self.distribution(logits, history), self.rng)
