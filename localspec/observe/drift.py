"""Acceptance drift: a proposer accepted far less on a route than its own history says.

A changed system prompt, model file or kind of work shows first as acceptance falling for
one source on one route. Each route, pair and source accumulates drafted and accepted tokens
until `min_drafted` (default 200) are in, then compares the rate with the history's from
before this process (`baseline`); a drop beyond `threshold` (default 30%, relative) raises
one alarm, which re-arms once a later window is back within it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from localspec.observe.observation import Observation

# a route, pair and source's acceptance rate in the persisted history (None: no history)
Baseline = Callable[[str, str, str], float | None]


@dataclass(frozen=True)
class DriftAlarm:
    route: str
    pair: str
    source: str
    rate: float  # accepted / drafted over the window that raised it
    baseline: float
    drafted: int

    @property
    def detail(self) -> str:
        return (
            f"acceptance {self.rate:.0%} over the last {self.drafted} drafted tokens, "
            f"against {self.baseline:.0%} in the history"
        )


@dataclass
class _Window:
    drafted: int = 0
    accepted: int = 0
    baseline: float | None = None
    looked_up: bool = False
    alarmed: bool = False


@dataclass
class DriftWatch:
    baseline: Baseline | None = None  # None: no history (no alarm)
    threshold: float = 0.30
    min_drafted: int = 200
    _windows: dict[tuple[str, str, str], _Window] = field(default_factory=dict)

    def alarms(self) -> list[tuple[str, str, str]]:
        """The route, pair and source of every alarm standing now."""
        # a snapshot: /metrics reads it on the event loop while the worker adds keys
        return [key for key, window in list(self._windows.items()) if window.alarmed]

    def observe(self, observation: Observation) -> list[DriftAlarm]:
        """Account a generation's drafts; returns the alarms it raised."""
        raised = []
        for source, counts in observation.by_proposer.items():
            if counts.drafted == 0:
                continue
            key = (observation.route, observation.pair, source)
            window = self._windows.setdefault(key, _Window())
            if not window.looked_up:  # the history before this process's own requests
                window.looked_up = True
                window.baseline = self.baseline(*key) if self.baseline else None
            window.drafted += counts.drafted
            window.accepted += counts.accepted
            if window.drafted >= self.min_drafted:
                alarm = self._judge(key, window)
                if alarm is not None:
                    raised.append(alarm)
        return raised

    def _judge(self, key: tuple[str, str, str], window: _Window) -> DriftAlarm | None:
        rate = window.accepted / window.drafted
        drafted = window.drafted
        window.drafted = window.accepted = 0
        if window.baseline is None or window.baseline <= 0:
            return None
        dropped = rate < window.baseline * (1 - self.threshold)
        was_alarmed, window.alarmed = window.alarmed, dropped
        if not dropped or was_alarmed:
            return None
        return DriftAlarm(*key, rate, window.baseline, drafted)
