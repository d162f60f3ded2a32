"""The p95 guard's decisions, on observations whose figures are set by hand: each carries
plain decoding's estimate beside it, on its own clock ("recent") unless a test says otherwise."""

from __future__ import annotations

import math
from dataclasses import replace

from localspec.observe.guard import GuardSettings, LatencyGuard, p95
from localspec.observe.observation import Observation
from localspec.speculative.stats import ProposerStats
from tests.observe.observations import made

SETTINGS = GuardSettings(min_requests=3, window=5, cooldown=2)


def observation(
    itl_s: float,
    *,
    drafted: int = 0,
    accepted: int = 0,
    guard: str = "",
    route: str = "chat",
    plain_s: float = 0.050,
    basis: str = "recent",
) -> Observation:
    """A generation of 11 tokens taking `itl_s` per token after the first, beside plain
    decoding's `plain_s` (a plain one's own time)."""
    by_proposer = {"ngram": ProposerStats(10, drafted, accepted)} if drafted else {}
    return made(
        route=route,
        drafted=drafted,
        accepted=accepted,
        generation_s=10 * itl_s,
        by_proposer=by_proposer,
        guard=guard,
        plain_itl_s=plain_s if drafted else itl_s,
        plain_basis=basis if drafted else "own",
    )


def test_p95_is_the_nearest_rank() -> None:
    assert p95([3.0, 1.0, 2.0]) == 3.0
    assert p95([float(i) for i in range(1, 101)]) == 95.0


def test_slower_speculation_falls_back_for_the_cool_down_then_probes_again() -> None:
    guard = LatencyGuard(SETTINGS)
    assert guard.observe(observation(0.050)) is None  # plain
    decided = [guard.observe(observation(0.060, drafted=8, accepted=6)) for _ in range(3)]
    assert decided[:2] == [None, None]  # judged once three are in
    event = decided[2]
    assert event is not None and (event.kind, event.reason) == ("fallback", "latency")
    assert math.isclose(event.speculative_p95_s, 0.060) and math.isclose(event.plain_p95_s, 0.050)
    assert guard.forced_plain("chat", "t+d") == "latency"
    assert guard.forced_plain("complete", "t+d") == ""  # other routes go on speculating
    assert guard.states() == {("chat", "t+d"): "latency"}
    assert guard.observe(observation(0.050, guard="latency")) is None
    probe = guard.observe(observation(0.050, guard="latency"))
    assert probe is not None and probe.kind == "probe"
    assert guard.forced_plain("chat", "t+d") == "" and guard.states() == {}
    # the probe starts a fresh window: one slow request is not judged alone
    assert guard.observe(observation(0.060, drafted=8, accepted=6)) is None


def test_overlapping_requests_neither_refall_nor_reprobe() -> None:
    """With several slots, a request that began speculating before the fallback ends during
    the cool-down, and guarded ones still running end after the probe."""
    guard = LatencyGuard(SETTINGS)
    guard.observe(observation(0.050))
    events = [guard.observe(observation(0.060, drafted=8, accepted=6)) for _ in range(3)]
    assert events[-1] is not None and events[-1].kind == "fallback"
    late = [guard.observe(observation(0.090, drafted=8, accepted=6)) for _ in range(3)]
    assert late == [None] * 3 and guard.forced_plain("chat", "t+d") == "latency"
    assert guard.observe(observation(0.050, guard="latency")) is None
    probe = guard.observe(observation(0.050, guard="latency"))
    assert probe is not None and probe.kind == "probe"
    assert guard.observe(observation(0.050, guard="latency")) is None  # no second probe
    assert guard.forced_plain("chat", "t+d") == ""


def test_speculation_within_the_margin_keeps_speculating() -> None:
    guard = LatencyGuard(SETTINGS)
    guard.observe(observation(0.050))
    for _ in range(6):
        assert guard.observe(observation(0.054, drafted=8, accepted=6)) is None
    assert guard.states() == {}


def test_wasted_drafts_fall_back_on_cost() -> None:
    guard = LatencyGuard(SETTINGS)
    guard.observe(observation(0.050))
    events = [guard.observe(observation(0.040, drafted=40, accepted=2)) for _ in range(3)]
    event = events[-1]
    assert event is not None and event.reason == "cost" and event.waste == 19.0
    assert "19.0 rejected draft tokens per accepted one" in event.detail


def test_a_comparison_with_the_calibration_alone_never_falls_back() -> None:
    """Seven times the calibration's one-token decode: the machine may be busier now than
    when it was calibrated, so nothing is judged on it."""
    guard = LatencyGuard(SETTINGS)
    calibrated = observation(0.070, drafted=8, accepted=6, plain_s=0.010, basis="calibration")
    assert [guard.observe(calibrated) for _ in range(6)] == [None] * 6
    assert guard.states() == {}


def test_latency_is_judged_over_the_same_clock_requests_alone() -> None:
    """Each request against its own estimate: the p95s are over the same requests, and the
    calibration-only ones among them are left out (their 0.010 would make it fall back)."""
    guard = LatencyGuard(SETTINGS)
    calibrated = observation(0.070, drafted=8, accepted=6, plain_s=0.010, basis="calibration")
    events = []
    for plain_s in (0.050, 0.060, 0.065):
        events.append(guard.observe(calibrated))
        events.append(guard.observe(observation(0.070, drafted=8, accepted=6, plain_s=plain_s)))
    assert events == [None] * 6  # 0.070 against a p95 of 0.065: within the margin
    event = guard.observe(observation(0.090, drafted=8, accepted=6, plain_s=0.050, basis="own"))
    assert event is not None and event.reason == "latency"
    assert (event.speculative_p95_s, event.plain_p95_s) == (0.090, 0.065)


def test_a_request_an_editor_interrupted_is_no_evidence() -> None:
    guard = LatencyGuard(SETTINGS)
    guard.observe(observation(0.050))
    interrupted = replace(observation(0.500, drafted=8, accepted=6), interruptions=1)
    assert [guard.observe(interrupted) for _ in range(6)] == [None] * 6
    assert guard.states() == {}


def test_without_any_plain_figure_latency_is_not_judged() -> None:
    guard = LatencyGuard(SETTINGS)
    unknown = observation(0.5, drafted=8, accepted=6, plain_s=0.0, basis="")
    events = [guard.observe(unknown) for _ in range(6)]
    assert events == [None] * 6
