"""Greedy verification that gives plain decoding's answer despite llama.cpp's batch kernels.

llama.cpp's kernels for a batch of b tokens may round differently from its one-token kernel,
so the logits a batched verification computes for a position differ slightly from those plain
decoding computes for it, and so do the keys and values it writes: a near-tie could tip, and
every later position reads the difference (docs/exactness.md has the kernels and the evidence).

The calibration (`localspec.auto_io.measure_tie_noise`) decodes the same tokens one at a time
and in batches of each size, at a short and a long context, and compares the logits and the
cache bit for bit. The **exact width** is the largest size up to which every batch matched.
Greedy verification decodes a draft in chunks of that width, each only if the draft survived
the one before, so what it computes and writes is what plain decoding would: exact by
construction. Where no batch is exact the width is 1, every drafted token costs a one-token
decode, and `auto`, pricing that (`AutoDrafter.verify_chunk`), drafts only where it still pays.

Sampling is left alone: its distribution is the target's up to the same tiny noise.
`--no-redecode-ties` lets one batch decide for greedy requests too, for speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class TieGuard:
    """Greedy verification's exact width, from the calibration's measured kernel noise.

    `noise[b - 1]` is the largest change in a top-token gap that verifying b tokens at once
    made on this machine and build (0 for b = 1: that is plain decoding's own kernel); 0 for
    a larger b only where that size's logits and cache were bit-identical to one-token
    decoding's (`localspec.auto_io.KV_DRIFT` marks a cache that differed alone).
    """

    noise: tuple[float, ...]

    @property
    def exact_width(self) -> int:
        """The largest batch whose every size up to it measured bit-identical (at least 1)."""
        width = 1
        while width < len(self.noise) and self.noise[width] == 0.0:
            width += 1
        return width

    def chunk(self, batch: int) -> int:
        """How many tokens of a `batch`-token verification to decode at a time."""
        return min(batch, self.exact_width)


def top_two_gap(logits: npt.NDArray[np.float32]) -> float:
    """How far the best logit is ahead of the second best (0 when two share the best).

    Three linear passes (the best's index, then the largest value on either side of it),
    not a partition: on a row a constraint masked to -inf almost everywhere, numpy's
    partition took 13 ms (1.1 ms on a plain row) against 0.03 ms here. The bench reports it
    where a run first leaves plain decoding."""
    if logits.shape[0] < 2:
        return float("inf")
    best = int(np.argmax(logits))
    before = logits[:best].max() if best else -np.inf
    after = logits[best + 1 :].max() if best + 1 < logits.shape[0] else -np.inf
    return float(logits[best] - max(before, after))
