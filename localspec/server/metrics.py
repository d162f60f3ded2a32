"""`GET /metrics` (`serve --metrics`): Prometheus' text format, written by `prometheus_client`.

Two families. llama-server's `llamacpp:` names for what both servers have, so its Grafana
dashboards work unchanged; and `localspec_` series labelled by route, model pair, mode and
constraint, with the latency histograms and per-source draft counters llama-server lacks,
and the guard's and drift watch's state (`localspec.observe`). Everything is fed from the
runtime's `Observation`s and `WatchEvent`s, on the worker thread; `prometheus_client`'s
metrics are thread-safe, and a scrape reads them on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from localspec.observe.observation import Observation
from localspec.observe.watch import Watch, WatchEvent

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("route", "pair", "mode", "constraint")
# seconds: an editor's token (tens of ms on a GPU) up to an agent's first token (minutes)
_LATENCY = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WAITS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0, 600.0)
_CONSTRAINTS = {"json_schema": "json", "json_object": "json", "gbnf": "grammar", "lark": "grammar"}


def constraint_label(kind: str) -> str:
    """The `constraint` label: none, json, grammar, regex (a tool call's is its schema's)."""
    return _CONSTRAINTS.get(kind, kind) if kind and kind != "none" else "none"


class _Busy(Collector):
    """llama-server's gauges of what the worker is doing, read at scrape time."""

    def __init__(self, busy: Callable[[], tuple[int, int]]) -> None:
        self.busy = busy

    def collect(self) -> list[GaugeMetricFamily]:
        processing, deferred = self.busy()
        return [
            GaugeMetricFamily(
                "llamacpp:requests_processing", "Number of requests processing.", processing
            ),
            GaugeMetricFamily(
                "llamacpp:requests_deferred", "Number of requests deferred.", deferred
            ),
        ]


class _States(Collector):
    """The guard's and the drift watch's standing state, read at scrape time."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def collect(self) -> list[GaugeMetricFamily]:
        falling_back = GaugeMetricFamily(
            "localspec_guard_fallback",
            "1 while the guard keeps a route on plain decoding.",
            labels=("route", "pair", "reason"),
        )
        guard = self.watch.guard
        for (route, pair), reason in (guard.states() if guard else {}).items():
            falling_back.add_metric((route, pair, reason), 1)
        drifting = GaugeMetricFamily(
            "localspec_drift_alarm",
            "1 while a source's acceptance on a route is below its history's.",
            labels=("route", "pair", "source"),
        )
        for key in self.watch.drift.alarms() if self.watch.drift else []:
            drifting.add_metric(key, 1)
        return [falling_back, drifting]


class _Speedups(Collector):
    """Each route, pair and mode's speed-up over the server's life, read at scrape time: over
    the requests whose plain estimate was measured on their own clock where there are any
    (`basis="same_clock"`), else over those estimated from the calibration alone
    (`basis="calibration_only"`: another hour's clock, not a measured speed-up)."""

    def __init__(self) -> None:
        # (route, pair, mode) -> same-clock [plain s, measured s], calibration-only ones
        self.sums: dict[tuple[str, str, str], tuple[float, float, float, float]] = {}

    def add(self, o: Observation) -> None:
        key = (o.route, o.pair, o.mode)
        plain_s, measured_s = o.plain_itl_s * (o.generated_tokens - 1), o.generation_s
        same_plain, same_measured, calib_plain, calib_measured = self.sums.get(key, (0.0,) * 4)
        if o.same_clock:
            same_plain, same_measured = same_plain + plain_s, same_measured + measured_s
        else:
            calib_plain, calib_measured = calib_plain + plain_s, calib_measured + measured_s
        self.sums[key] = (same_plain, same_measured, calib_plain, calib_measured)

    def collect(self) -> list[GaugeMetricFamily]:
        speedup = GaugeMetricFamily(
            "localspec_speedup",
            "Plain decoding's estimated time over the measured one (see docs/metrics.md).",
            labels=("route", "pair", "mode", "basis"),
        )
        for (route, pair, mode), sums in list(self.sums.items()):
            same_plain, same_measured, calib_plain, calib_measured = sums
            if same_measured > 0:
                speedup.add_metric((route, pair, mode, "same_clock"), same_plain / same_measured)
            elif calib_measured > 0:
                ratio = calib_plain / calib_measured
                speedup.add_metric((route, pair, mode, "calibration_only"), ratio)
        return [speedup]


class ServerMetrics:
    """The server's metrics; `attach` subscribes them to a runtime's watch."""

    def __init__(self, busy: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        """`busy` says how many requests run and wait now (`GenerationWorker`).

        Counters get no `_created` series: one per counter doubles the output for a timestamp
        nobody graphs, and llama-server exports none. prometheus_client keeps that setting
        per process, so it holds for every registry of this process from here on."""
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Busy(busy))
        self.speedups = _Speedups()
        self.registry.register(self.speedups)
        self._llamacpp()
        self._localspec()

    def _counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry)

    def _llamacpp(self) -> None:
        """llama-server's series, under its names and help texts."""
        c = self._counter
        self.prompt_tokens = c("llamacpp:prompt_tokens", "Number of prompt tokens processed.")
        self.prompt_seconds = c("llamacpp:prompt_seconds", "Prompt process time")
        self.predicted = c("llamacpp:tokens_predicted", "Number of generation tokens processed.")
        self.predicted_seconds = c("llamacpp:tokens_predicted_seconds", "Predict process time")
        self.decodes = c("llamacpp:n_decode", "Number of llama_decode() calls")
        self.drafts = c("llamacpp:spec_decode_num_drafts", "Number of speculative drafts.")
        self.draft_tokens = c(
            "llamacpp:spec_decode_num_draft_tokens", "Number of speculative draft tokens."
        )
        self.accepted_tokens = c(
            "llamacpp:spec_decode_num_accepted_tokens", "Number of accepted draft tokens."
        )
        self.accepted_per_position = c(
            "llamacpp:spec_decode_num_accepted_tokens_per_pos",
            "Number of accepted draft tokens, by position in the draft.",
            ("position",),
        )

    def _localspec(self) -> None:
        h = self._histogram
        self.ttft = h("localspec_time_to_first_token_seconds", "Time to first token.", _WAITS)
        self.itl = h(
            "localspec_inter_token_latency_seconds",
            "Seconds between visible chunks of an answer (a speculative step's accepted "
            "tokens arrive together).",
            _LATENCY,
        )
        self.queue = h("localspec_queue_wait_seconds", "Time a request waited to start.", _WAITS)
        self.prompt = h(
            "localspec_prompt_processing_seconds", "Time processing a request's prompt.", _WAITS
        )
        self.draft_step = h(
            "localspec_draft_seconds_per_step",
            "Drafting time per target step, a request's mean.",
            _LATENCY,
        )
        by_source = (*LABELS, "source")
        c = self._counter
        self.requests = c("localspec_requests", "Generations finished.", LABELS)
        self.generated = c("localspec_generated_tokens", "Tokens generated.", LABELS)
        self.steps = c("localspec_target_steps", "Target verification steps.", LABELS)
        self.drafted = c("localspec_drafted_tokens", "Tokens drafted, by source.", by_source)
        self.accepted = c("localspec_accepted_tokens", "Draft tokens accepted.", by_source)
        by_position = (*LABELS, "position")
        self.drafted_at = c(
            "localspec_drafted_tokens_per_position", "Tokens drafted, by position.", by_position
        )
        self.accepted_at = c(
            "localspec_accepted_tokens_per_position", "Tokens accepted, by position.", by_position
        )
        self.choices = c(
            "localspec_auto_choices",
            "Steps for which auto chose each proposer and draft length.",
            (*LABELS, "choice"),
        )
        self.guarded = c(
            "localspec_guard_plain_requests",
            "Requests the guard ran plain.",
            (*LABELS, "reason"),
        )
        self.fallbacks = c(
            "localspec_guard_fallbacks",
            "Times a route fell back to plain decoding.",
            ("route", "pair", "reason"),
        )
        self.drift_alarms = c(
            "localspec_drift_alarms", "Acceptance drift alarms.", ("route", "pair", "source")
        )
        self.estimated = c(
            "localspec_plain_estimates",
            "Requests with plain decoding's speed estimated beside them, by the estimate's "
            "basis: own, recent, scaled (measured on the request's clock) or calibration.",
            (*LABELS, "basis"),
        )

    def attach(self, watch: Watch) -> None:
        """Hear every generation and guard or drift event of `watch`."""
        self.registry.register(_States(watch))
        watch.listeners.append(self.observe)
        watch.event_listeners.append(self.event)

    def observe(self, o: Observation) -> None:
        """Account one finished generation."""
        labels = (o.route, o.pair, o.mode, constraint_label(o.constraint))
        self._observe_llamacpp(o)
        self.requests.labels(*labels).inc()
        self.generated.labels(*labels).inc(o.generated_tokens)
        self.steps.labels(*labels).inc(o.target_steps)
        if o.generated_tokens:
            self.ttft.labels(*labels).observe(o.ttft_s)
        self.queue.labels(*labels).observe(o.queue_s)
        self.prompt.labels(*labels).observe(o.prefill_s)
        itl = self.itl.labels(*labels)
        for gap in o.gaps:
            itl.observe(gap)
        if o.target_steps:
            self.draft_step.labels(*labels).observe(o.draft_s / o.target_steps)
        for source, counts in o.by_proposer.items():
            if counts.drafted:
                self.drafted.labels(*labels, source).inc(counts.drafted)
                self.accepted.labels(*labels, source).inc(counts.accepted)
        for position, (drafted, accepted) in enumerate(
            zip(o.drafted_per_position, o.accepted_per_position, strict=True)
        ):
            self.drafted_at.labels(*labels, str(position)).inc(drafted)
            self.accepted_at.labels(*labels, str(position)).inc(accepted)
        for choice, steps in o.tuner_choices.items():
            self.choices.labels(*labels, choice).inc(steps)
        if o.guard:
            self.guarded.labels(*labels, o.guard).inc()
        # what the history's speed-up counts: an estimate, a time per token, no editor's wait
        if o.plain_itl_s > 0 and o.generated_tokens >= 2 and not o.interruptions:
            self.estimated.labels(*labels, o.plain_basis).inc()
            self.speedups.add(o)

    def _observe_llamacpp(self, o: Observation) -> None:
        self.prompt_tokens.inc(max(o.prompt_tokens - o.cached_tokens, 0))
        self.predicted.inc(o.generated_tokens)
        self.predicted_seconds.inc(o.generation_s)
        self.prompt_seconds.inc(o.prefill_s)
        self.decodes.inc(o.target_steps)
        drafting = sum(counts.steps for counts in o.by_proposer.values() if counts.drafted)
        self.drafts.inc(drafting)
        self.draft_tokens.inc(o.drafted)
        self.accepted_tokens.inc(o.accepted)
        for position, accepted in enumerate(o.accepted_per_position):
            self.accepted_per_position.labels(str(position)).inc(accepted)

    def event(self, event: WatchEvent) -> None:
        """A guard decision or a drift alarm."""
        if event.kind == "fallback":
            self.fallbacks.labels(event.route, event.pair, event.source).inc()
        elif event.kind == "drift":
            self.drift_alarms.labels(event.route, event.pair, event.source).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
