"""The runtime's watchers in one place: the guard decides before a generation whether its
route runs plain, and after it every watcher hears what it showed.

Each observation carries plain decoding's estimate beside it, measured on its own clock
where it can be (`localspec.observe.plain`). Listeners (a server's `/metrics`, the history
file) receive each `Observation` and each `WatchEvent`. They are there to watch: one that
fails is logged and never fails an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from localspec.observe.drift import DriftWatch
from localspec.observe.guard import LatencyGuard
from localspec.observe.observation import Observation
from localspec.observe.plain import PlainReference
from localspec.speculative.stats import GenerationStats

_log = logging.getLogger(__name__)

# the label a server's routes export under ("complete" is also the command's)
_SERVER_ROUTES = {"complete": "completion"}


@dataclass(frozen=True)
class WatchEvent:
    """A guard's decision ("fallback", "probe") or a drift alarm ("drift")."""

    kind: str
    route: str
    pair: str
    source: str
    detail: str


ObservationListener = Callable[[Observation], None]
EventListener = Callable[[WatchEvent], None]


@dataclass
class Watch:
    """`surface` names the command a runtime serves ("tui", "complete"; "" for a server,
    whose requests are labelled by their route); `plain` estimates plain decoding beside
    each generation."""

    pair: str
    guard: LatencyGuard | None = None
    drift: DriftWatch | None = None
    surface: str = ""
    plain: PlainReference = field(default_factory=PlainReference)
    listeners: list[ObservationListener] = field(default_factory=list)
    event_listeners: list[EventListener] = field(default_factory=list)

    def label(self, route: str) -> str:
        """The route label a request's observation carries."""
        return self.surface or _SERVER_ROUTES.get(route, route)

    def forced_plain(self, route: str) -> str:
        """The guard rule that makes a request on `route` run plain now ("" for none)."""
        return self.guard.forced_plain(self.label(route), self.pair) if self.guard else ""

    def finish(
        self,
        stats: GenerationStats,
        *,
        route: str,
        mode: str,
        chunk_times: Sequence[float],
        queue_s: float = 0.0,
        forced: str = "",
    ) -> Observation:
        """Tell every watcher what a finished generation showed; returns the observation."""
        label = self.label(route)
        plain = self.plain.estimate(stats, label, self.pair)
        self.plain.observed(label, self.pair, plain, interrupted=stats.interruptions > 0)
        observation = Observation.of(
            stats,
            route=label,
            pair=self.pair,
            mode=mode,
            chunk_times=chunk_times,
            queue_s=queue_s,
            plain=plain,
            guard=forced,
        )
        try:
            events = self._judge(observation)
        except Exception:  # a history that cannot be read (a full disk, a closed file)
            _log.exception("the speculation guard failed; the answer is unaffected")
            events = []
        for listener in self.listeners:
            self._call(listener, observation)
        for event in events:
            _log.warning(
                "speculation on %s (%s): %s: %s", event.route, event.pair, event.kind, event.detail
            )
            for event_listener in self.event_listeners:
                self._call(event_listener, event)
        return observation

    def _judge(self, observation: Observation) -> list[WatchEvent]:
        events = []
        if self.guard is not None:
            decided = self.guard.observe(observation)
            if decided is not None:
                kind, reason = decided.kind, decided.reason
                events.append(WatchEvent(kind, decided.route, decided.pair, reason, decided.detail))
        if self.drift is not None:
            for alarm in self.drift.observe(observation):
                events.append(
                    WatchEvent("drift", alarm.route, alarm.pair, alarm.source, alarm.detail)
                )
        return events

    @staticmethod
    def _call(listener: Callable[..., None], item: object) -> None:
        try:
            listener(item)
        except Exception:  # a watcher's failure (a full disk) must not fail the answer
            _log.exception("a speculation watcher failed; the answer is unaffected")
