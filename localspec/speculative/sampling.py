"""Turning target or draft logits into the distribution a token is drawn from.

One `Sampler` applies the same chain on every path (plain decoding, draft-model drafting,
verification), which is what makes speculative output distributed exactly like plain output:
penalties -> top-k -> top-p -> min-p -> temperature, the order llama.cpp's default chain uses.
Temperature 0 means greedy: the distribution collapses to the argmax of the penalised logits.

Drawing a token consumes exactly one uniform number from the generator (inverse CDF), so a
sample-and-compare verification consumes the random stream exactly as plain decoding does:
with the same seed, n-gram speculation reproduces plain sampling token for token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from localspec.errors import InvalidSettingsError

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SamplingSettings:
    """What the user asked for; identical semantics to llama.cpp's sampler of the same names."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (
                0.0 <= self.temperature < math.inf,
                "temperature must be a finite number >= 0 (0 means greedy)",
            ),
            (self.top_k >= 0, "top_k must be >= 0 (0 disables it)"),
            (0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]"),
            (0.0 <= self.min_p < 1.0, "min_p must be in [0, 1)"),
            (self.repeat_penalty > 0.0, "repeat_penalty must be > 0 (1 disables it)"),
            (self.repeat_last_n >= 0, "repeat_last_n must be >= 0"),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]"),
            # numpy's SeedSequence takes non-negative integers; None draws a fresh seed
            (
                self.seed is None or 0 <= self.seed < 2**63,
                "seed must be in [0, 2**63) (or None for a random one)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidSettingsError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalised(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        ) and self.repeat_last_n > 0


def apply_penalties(
    logits: FloatArray, history: Sequence[int], settings: SamplingSettings
) -> FloatArray:
    """Penalise tokens seen in the last `repeat_last_n` tokens of `history` (returns a copy)."""
    if not settings.penalised or not history:
        return logits
    window = np.asarray(history[-settings.repeat_last_n :], dtype=np.int64)
    window = window[window < logits.shape[0]]
    ids, counts = np.unique(window, return_counts=True)
    out = logits.copy()
    seen = out[ids]
    seen = np.where(seen > 0, seen / settings.repeat_penalty, seen * settings.repeat_penalty)
    seen -= counts * settings.frequency_penalty + settings.presence_penalty
    out[ids] = seen
    return out


def _softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    shifted = np.exp(logits - np.max(logits))
    probs: npt.NDArray[np.float64] = shifted / shifted.sum()
    return probs


def distribution(
    logits: FloatArray, history: Sequence[int], settings: SamplingSettings
) -> npt.NDArray[np.float64]:
    """The full probability vector the sampler draws from (zeros outside the kept set).

    Only meaningful for temperature > 0; greedy callers use `greedy_token`.
    """
    z = apply_penalties(logits, history, settings).astype(np.float64)
    keep = np.ones(z.shape[0], dtype=bool)
    if 0 < settings.top_k < z.shape[0]:
        kth = np.partition(z, -settings.top_k)[-settings.top_k]
        keep &= z >= kth
    if settings.top_p < 1.0 or settings.min_p > 0.0:
        p1 = _softmax(np.where(keep, z, -np.inf))
        if settings.top_p < 1.0:
            order = np.argsort(-p1, kind="stable")
            cumulative = np.cumsum(p1[order])
            # keep the smallest prefix whose mass reaches top_p (always at least one token)
            cut = int(np.searchsorted(cumulative, settings.top_p)) + 1
            top = np.zeros_like(keep)
            top[order[:cut]] = True
            keep &= top
        if settings.min_p > 0.0:
            keep &= p1 >= settings.min_p * p1.max()
    return _softmax(np.where(keep, z / settings.temperature, -np.inf))


def greedy_token(logits: FloatArray, history: Sequence[int], settings: SamplingSettings) -> int:
    """The argmax of the penalised logits: what temperature 0 decodes."""
    return int(np.argmax(apply_penalties(logits, history, settings)))


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
    """A `SamplingSettings` plus the random stream it draws from, for one generation."""

    def __init__(self, settings: SamplingSettings, rng: np.random.Generator) -> None:
        self.settings = settings
        self.rng = rng

    def pick(self, logits: FloatArray, history: Sequence[int]) -> int:
        """Decode one token the way plain decoding does."""
        if self.settings.greedy:
            return greedy_token(logits, history, self.settings)
        return draw(distribution(logits, history, self.settings), self.rng)
