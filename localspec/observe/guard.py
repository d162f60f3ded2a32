"""The p95 guard: a route whose speculation makes answers slower, or wastes too much work,
than plain decoding runs plain for a cool-down, then probes speculation again.

Per route and model pair it keeps a window of recent speculative requests, each with its
mean time per token (an `Observation`'s `itl_s`) and plain decoding's estimate beside it
(`plain_itl_s`, `localspec.observe.plain`). When the p95 of the window's times passes the
p95 of their plain estimates by more than `margin`, or rejected draft tokens per accepted
one pass `max_waste`, the route falls back for `cooldown` requests. Only estimates measured
on the requests' own clock are compared: a machine that got busier since the calibration
(or since the last plain request) is not speculation's loss, so a request whose estimate is
the calibration's alone is no evidence of latency (its waste still counts). With several slots,
requests overlap: one that started speculating before a fallback, or one an editor's request
interrupted (its times are partly the editor's), is no evidence and is not counted. Counting
requests rather than seconds keeps the guard a pure function of what it observed, so tests
drive it with the engine's virtual clock and no wall clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from localspec.observe.observation import Observation


@dataclass(frozen=True)
class GuardSettings:
    """When the guard acts. `window` speculative requests are judged once `min_requests` of
    them are in; `margin` 0.10: speculation's p95 may be 10% above plain decoding's."""

    margin: float = 0.10
    window: int = 20
    min_requests: int = 5
    cooldown: int = 10
    max_waste: float = 3.0  # rejected draft tokens per accepted one


GuardKind = Literal["fallback", "probe"]


@dataclass(frozen=True)
class GuardEvent:
    """A change of a route's state: it fell back (`reason` "latency" or "cost", with the
    figures that decided it) or its cool-down ended and speculation is probed again."""

    kind: GuardKind
    route: str
    pair: str
    reason: str = ""
    speculative_p95_s: float = 0.0
    plain_p95_s: float = 0.0
    waste: float = 0.0

    @property
    def detail(self) -> str:
        if self.kind == "probe":
            return "cool-down over: speculation is tried again"
        if self.reason == "cost":
            return f"{self.waste:.1f} rejected draft tokens per accepted one"
        return (
            f"p95 {self.speculative_p95_s * 1e3:.1f} ms/token under speculation against "
            f"{self.plain_p95_s * 1e3:.1f} plain"
        )


def percentile(values: Sequence[float], percent: int) -> float:
    """The `percent`th percentile of `values` (not empty) by the nearest-rank rule: the
    smallest value with at least `percent`% of the values at or below it."""
    ordered = sorted(values)
    rank = max(0, -(-percent * len(ordered) // 100) - 1)
    return ordered[rank]


def p95(values: Sequence[float]) -> float:
    """The 95th percentile by the nearest-rank rule (the largest of fewer than 20 values)."""
    return percentile(values, 95)


@dataclass
class _RouteState:
    speculative: deque[Observation]
    cooling: int = 0  # requests still to run plain
    reason: str = ""


@dataclass
class LatencyGuard:
    """The guard's state for every route and pair it has seen (one process's)."""

    settings: GuardSettings = field(default_factory=GuardSettings)
    # False: it never makes a route run plain (`--no-guard`, benchmarks)
    acting: bool = True
    _routes: dict[tuple[str, str], _RouteState] = field(default_factory=dict)

    def _state(self, route: str, pair: str) -> _RouteState:
        key = (route, pair)
        if key not in self._routes:
            self._routes[key] = _RouteState(deque(maxlen=self.settings.window))
        return self._routes[key]

    def forced_plain(self, route: str, pair: str) -> str:
        """The rule ("latency", "cost") that makes the next request on this route run plain,
        or "" when it may speculate."""
        state = self._state(route, pair)
        return state.reason if state.cooling > 0 else ""

    def states(self) -> dict[tuple[str, str], str]:
        """Each route and pair that is falling back now, with the rule that decided it."""
        # a snapshot: /metrics reads it on the event loop while the worker adds routes
        return {key: s.reason for key, s in list(self._routes.items()) if s.cooling > 0}

    def observe(self, observation: Observation) -> GuardEvent | None:
        """Account a finished generation; returns the event if the route's state changed."""
        state = self._state(observation.route, observation.pair)
        if observation.guard:
            if state.cooling <= 0:  # one that started before the probe (several slots)
                return None
            state.cooling -= 1
            if state.cooling > 0:
                return None
            state.reason = ""
            state.speculative.clear()
            return GuardEvent("probe", observation.route, observation.pair)
        if observation.interruptions or state.cooling > 0:
            # its times include another request's, or it started speculating before the
            # fallback (several slots): no evidence either way
            return None
        if not observation.speculated:
            return None
        if observation.generated_tokens >= 2:
            state.speculative.append(observation)
        return self._judge(state, observation.route, observation.pair)

    def _judge(self, state: _RouteState, route: str, pair: str) -> GuardEvent | None:
        window = list(state.speculative)
        if not self.acting or len(window) < self.settings.min_requests:
            return None
        accepted = sum(o.accepted for o in window)
        waste = sum(o.drafted - o.accepted for o in window) / max(accepted, 1)
        # each request beside plain decoding on its own clock: both p95s over the same ones
        timed = [o for o in window if o.same_clock]
        enough = len(timed) >= self.settings.min_requests
        speculative = p95([o.itl_s for o in timed]) if enough else 0.0
        plain = p95([o.plain_itl_s for o in timed]) if enough else 0.0
        if waste > self.settings.max_waste:
            reason = "cost"
        elif enough and speculative > plain * (1 + self.settings.margin):
            reason = "latency"
        else:
            return None
        state.cooling, state.reason = self.settings.cooldown, reason
        return GuardEvent("fallback", route, pair, reason, speculative, plain, waste)
