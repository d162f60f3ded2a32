"""Greedy verification that gives plain decoding's answer despite llama.cpp's batch kernels.

llama.cpp's kernels for a batch of b tokens may round differently from its one-token kernel,
so the logits a batched verification computes for a position differ slightly from those plain
decoding computes for it. Where the target's top two tokens are that close, the batch could
pick the other one, and every later token would differ from `--spec off`. Worse, the keys and
values the batch wrote are rounded too, so every later position carries the difference.

The calibration measures, per batch size, the largest change batching makes to the gap between
the top token and its runners-up (`localspec.tuning.measure_tie_noise`). Two rules follow:

* Batches up to the **exact width** (every size measured bit-identical to one-token decoding;
  on llama.cpp's CPU backend 3, since its repacked quantized kernels switch from per-row
  products to a 4-row GEMM at 4 rows) give plain decoding's logits and cache exactly. Greedy
  verification decodes the draft in chunks of that width, each only if the draft survived the
  one before, so a rejection early in a long draft also skips the chunks after it.
* Wider batches (where no width is exact) are checked position by position: a batched gap
  under the noise times a safety margin is a near-tie, decided by the one-token decode plain
  decoding uses.

Sampling is left alone: its distribution is already the target's up to the same noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# The bound is the largest gap change seen over a few hundred calibration positions; rarer,
# larger changes exist, and a re-decode costs only one target token, so the margin is wide.
TIE_MARGIN = 2.0


@dataclass(frozen=True)
class TieGuard:
    """The near-tie bound per verification batch size, from measured kernel noise.

    `noise[b - 1]` is the largest change in a top-token gap that verifying b tokens at once
    made on this machine and build (0 for b = 1: that is plain decoding's own kernel).
    """

    noise: tuple[float, ...]
    margin: float = TIE_MARGIN

    @property
    def exact_width(self) -> int:
        """The largest batch whose every size up to it measured bit-identical (at least 1)."""
        width = 1
        while width < len(self.noise) and self.noise[width] == 0.0:
            width += 1
        return width

    @property
    def chunk_width(self) -> int | None:
        """The width greedy verification decodes at a time, or None: one batch (no exact width)."""
        width = self.exact_width
        return width if width > 1 else None

    def chunk(self, batch: int) -> int:
        """How many tokens of a `batch`-token verification to decode at a time."""
        return self.chunk_width or batch

    def bound(self, batch: int) -> float:
        """Batched top-2 gaps below this may not be what one-token decoding would give."""
        if batch <= 1 or not self.noise:
            return 0.0
        measured = self.noise[batch - 1] if batch <= len(self.noise) else max(self.noise)
        return self.margin * measured


def top_two_gap(logits: npt.NDArray[np.float32]) -> float:
    """How far the best logit is ahead of the second best (0 when two share the best).

    Three linear passes (the best's index, then the largest value on either side of it),
    not a partition: on a row a constraint masked to -inf almost everywhere, numpy's
    partition took 13 ms (1.1 ms on a plain row) against 0.03 ms here, and greedy
    verification asks this for every drafted position where no batch width is exact."""
    if logits.shape[0] < 2:
        return float("inf")
    best = int(np.argmax(logits))
    before = logits[:best].max() if best else -np.inf
    after = logits[best + 1 :].max() if best + 1 < logits.shape[0] else -np.inf
    return float(logits[best] - max(before, after))
