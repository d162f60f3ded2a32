"""Plain decoding's speed beside each generation, measured on the same clock.

A speed-up is plain decoding's time over speculation's for the same answer. Plain decoding
of that answer did not run, so its time is estimated, and an estimate is only as good as the
clock it was measured on: this machine an hour ago, or before a build started beside it, is
another machine, and comparing with it books the load as speculation's loss. Each estimate
records its basis, best first:

- "own": the generation's own steps that drafted nothing. A generation that drafted nothing
  (`off`, a guard's cool-down, `auto` finding no draft worth it) is plain decoding itself,
  its speed-up 1 by definition; a speculative one with `MIN_OWN_STEPS` such steps is priced
  at their mean, less what only speculation spent in them (pricing, drafting, learning).
- "recent": plain decoding on the same route and model pair within the last `window_s`
  seconds: this process's generations with an own estimate, and the history file's from the
  processes before it (`History.attach` seeds them; `complete` runs one request a process).
- "scaled": the calibration's one-token decode, scaled by how the generation's own
  verification decodes (one-row ones where it has `MIN_ONE_ROW`, else every size) compare
  with what the calibration measured for decodes of their sizes: every generation that
  drafted decoded something on its own clock.
- "calibration": the calibration's one-token decode alone, measured once on another clock.
  Not a same-clock figure: `stats` and `/metrics` label it and the guard never acts on it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from localspec.speculative.stats import GenerationStats

Basis = Literal["own", "recent", "scaled", "calibration", ""]
SAME_CLOCK: frozenset[str] = frozenset({"own", "recent", "scaled"})
MIN_OWN_STEPS = 8  # fewer undrafted steps are too few to price plain decoding with
MIN_ONE_ROW = 4  # one-row decodes that scale the calibration without its batch curve
RECENT_S = 300.0
RECENT_SAMPLES = 3  # the newest plain figures within the window, their median


def same_clock(basis: str) -> bool:
    """Whether an estimate of this basis was measured on the clock of what it is compared with."""
    return basis in SAME_CLOCK


@dataclass(frozen=True)
class PlainEstimate:
    """Plain decoding's seconds per token beside one generation (0: unknown), and how it was
    estimated."""

    itl_s: float = 0.0
    basis: Basis = ""


def _itl_s(stats: GenerationStats) -> float:
    return stats.generation_s / (stats.generated_tokens - 1) if stats.generated_tokens > 1 else 0.0


def _outside_s(stats: GenerationStats) -> float:
    """Seconds per step spent between the steps (the caller writing the text out): plain
    decoding would have spent them too, once a token."""
    if not stats.target_steps:
        return 0.0
    return max(stats.generation_s - stats.steps_s, 0.0) / stats.target_steps


def own_estimate(stats: GenerationStats) -> float:
    """Plain decoding's seconds per token from the generation's own undrafted steps (0: too
    few of them)."""
    if stats.drafted == 0:
        return _itl_s(stats)
    if stats.plain_steps < MIN_OWN_STEPS:
        return 0.0
    return stats.plain_steps_s / stats.plain_steps + _outside_s(stats)


def scaled_estimate(stats: GenerationStats, curve: Sequence[float]) -> float:
    """The calibration's one-token decode (`curve[0]`; `curve[b - 1]` decodes b tokens) times
    how much slower or faster the generation's own decodes ran than the calibration's of
    the same sizes (0: no decode to compare)."""
    one_row = stats.decodes.get("1", [0.0, 0.0])
    if one_row[0] >= MIN_ONE_ROW:
        measured = one_row[1]
        calibrated = one_row[0] * curve[0]
    else:
        measured = calibrated = 0.0
        for sizes, (steps, seconds) in stats.decodes.items():
            batches = [int(size) for size in sizes.split("+")]
            if max(batches) <= len(curve):
                measured += seconds
                calibrated += steps * sum(curve[b - 1] for b in batches)
    if measured <= 0 or calibrated <= 0:
        return 0.0
    return curve[0] * measured / calibrated + _outside_s(stats)


@dataclass
class PlainReference:
    """Recent plain decoding per route and model pair, and the estimates made from it.

    `calibration` gives the calibration's verification curve (seconds to decode b tokens at
    index b - 1), None while there is none; `clock` is the wall clock recent figures are
    dated on (the history's), so figures from other processes compare."""

    calibration: Callable[[], Sequence[float] | None] = lambda: None
    window_s: float = RECENT_S
    clock: Callable[[], float] = time.time
    _recent: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)

    def add(self, route: str, pair: str, itl_s: float, at: float | None = None) -> None:
        """A plain figure (seconds per token) measured on `route` at `at` (default now)."""
        if itl_s <= 0:
            return
        recent = self._recent.setdefault((route, pair), deque(maxlen=RECENT_SAMPLES))
        recent.append((self.clock() if at is None else at, itl_s))

    def recent(self, route: str, pair: str) -> float:
        """The median of the newest plain figures within the window (0: none)."""
        since = self.clock() - self.window_s
        figures = [itl for at, itl in self._recent.get((route, pair), ()) if at >= since]
        return statistics.median(figures) if figures else 0.0

    def estimate(self, stats: GenerationStats, route: str, pair: str) -> PlainEstimate:
        """Plain decoding beside the generation that ended with `stats`, by the best basis."""
        own = own_estimate(stats)
        if own > 0:
            return PlainEstimate(own, "own")
        recent = self.recent(route, pair)
        if recent > 0:
            return PlainEstimate(recent, "recent")
        curve = self.calibration()
        if not curve:
            return PlainEstimate()
        scaled = scaled_estimate(stats, curve)
        if scaled > 0:
            return PlainEstimate(scaled, "scaled")
        return PlainEstimate(curve[0], "calibration")

    def observed(self, route: str, pair: str, estimate: PlainEstimate, interrupted: bool) -> None:
        """Keep a generation's own plain figure for the generations after it (one an
        editor's request interrupted took that request's time too: not kept)."""
        if estimate.basis == "own" and not interrupted:
            self.add(route, pair, estimate.itl_s)
