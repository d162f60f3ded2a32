"""Plain decoding's estimate beside a generation, by basis, on statistics set by hand; the
history's plain figures from earlier processes; `/metrics` labelling a calibration-only
speed-up."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from localspec.observe.history import History
from localspec.observe.plain import MIN_ONE_ROW, MIN_OWN_STEPS, PlainEstimate, PlainReference
from localspec.observe.watch import Watch
from localspec.server.metrics import ServerMetrics
from localspec.speculative.stats import GenerationStats
from tests.observe.observations import made
from tests.observe.test_guard_runtime import samples

CURVE = (0.030, 0.040, 0.050, 0.060)  # the calibration: seconds to decode 1, 2, 3, 4 tokens


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drafted(**fields: Any) -> GenerationStats:
    """A speculative generation: 21 tokens in 10 steps and 2 s, every second inside steps."""
    stats = GenerationStats(
        mode="auto",
        generated_tokens=21,
        target_steps=10,
        drafted=20,
        accepted=10,
        total_s=2.0,
        steps_s=2.0,
    )
    return replace(stats, **fields)


def reference(clock: Clock | None = None) -> PlainReference:
    return PlainReference(lambda: CURVE, clock=clock or Clock())


def test_a_generation_that_drafted_nothing_is_its_own_plain_decoding() -> None:
    plain = GenerationStats(mode="auto", generated_tokens=11, target_steps=11, total_s=0.5)
    assert reference().estimate(plain, "chat", "t+d") == PlainEstimate(0.05, "own")


def test_enough_undrafted_steps_price_plain_decoding_with_the_time_between_steps() -> None:
    stats = drafted(plain_steps=MIN_OWN_STEPS, plain_steps_s=0.4, steps_s=1.9)
    estimate = reference().estimate(stats, "chat", "t+d")
    # 0.05 a step, and 0.1 s outside the 10 steps: 0.01 a step
    assert estimate.basis == "own" and estimate.itl_s == pytest.approx(0.06)


def test_too_few_undrafted_steps_give_way_to_recent_plain_decoding() -> None:
    clock = Clock()
    plain = reference(clock)
    plain.add("chat", "t+d", 0.04, at=clock.now - 400)  # before the window
    for itl_s in (0.05, 0.07, 0.06):
        plain.add("chat", "t+d", itl_s)
    plain.add("infill", "t+d", 0.09)  # another route
    stats = drafted(plain_steps=MIN_OWN_STEPS - 1, plain_steps_s=0.1, decodes={"1": [7.0, 0.21]})
    assert plain.estimate(stats, "chat", "t+d") == PlainEstimate(0.06, "recent")
    clock.now += 301  # the figures grow old: the calibration scaled by the request's decodes
    assert plain.estimate(stats, "chat", "t+d").basis == "scaled"


def test_the_calibration_scaled_by_the_requests_own_decodes() -> None:
    # its 3-token decodes took 0.075 s each, 1.5x the calibration's: plain decoding 0.045
    stats = drafted(decodes={"3": [10.0, 0.75]}, steps_s=2.0)
    assert reference().estimate(stats, "chat", "t+d").itl_s == pytest.approx(0.045)
    # decodes in chunks compare with the chunks' sum; sizes beyond the curve are left out
    stats = drafted(decodes={"2+2": [5.0, 0.6], "9": [5.0, 9.0]})
    assert reference().estimate(stats, "chat", "t+d").itl_s == pytest.approx(0.03 * 0.6 / 0.4)
    # one-row decodes, when there are enough, decide alone
    stats = drafted(decodes={"1": [MIN_ONE_ROW, 0.24], "4": [5.0, 0.3]})
    estimate = reference().estimate(stats, "chat", "t+d")
    assert estimate.basis == "scaled" and estimate.itl_s == pytest.approx(0.06)
    # one fewer: every size counts, the 4-token decodes too
    stats = drafted(decodes={"1": [MIN_ONE_ROW - 1, 0.18], "4": [5.0, 0.3]})
    calibrated = (MIN_ONE_ROW - 1) * 0.03 + 5.0 * CURVE[3]
    expected = 0.03 * 0.48 / calibrated
    assert reference().estimate(stats, "chat", "t+d").itl_s == pytest.approx(expected)


def test_the_calibration_alone_is_flagged_and_nothing_is_no_estimate() -> None:
    one_step = GenerationStats(mode="auto", generated_tokens=3, target_steps=1, drafted=2)
    assert reference().estimate(one_step, "chat", "t+d") == PlainEstimate(0.030, "calibration")
    assert PlainReference().estimate(one_step, "chat", "t+d") == PlainEstimate()


def test_the_history_gives_plain_figures_of_earlier_processes(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    clock = Clock()
    with History(path) as history:
        history.record(made(plain_itl_s=0.2, plain_basis="own"), at=clock.now - 30)
        history.record(made(plain_itl_s=0.9, plain_basis="own"), at=clock.now - 3000)  # old
        history.record(made(plain_itl_s=0.5, plain_basis="recent", drafted=4), at=clock.now)
        history.record(made(plain_itl_s=0.7, plain_basis="own", interruptions=1), at=clock.now)
    watch = Watch("t+d", plain=PlainReference(clock=clock))
    with History(path) as history:
        history.attach(watch)
    assert watch.plain.recent("chat", "t+d") == 0.2


def test_a_history_of_schema_1_is_upgraded_and_its_estimates_count_as_calibration(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.sqlite3"
    with History(path) as history:
        history.record(made(drafted=4, accepted=2, plain_itl_s=0.2, plain_basis="own"))
    with sqlite3.connect(path) as db:  # back to schema 1: no plain_basis
        db.execute("ALTER TABLE generations DROP COLUMN plain_basis")
        db.execute("PRAGMA user_version = 1")
    with History(path) as history:
        (row,) = history.summary(days=1)
        history.record(made(plain_itl_s=0.1, plain_basis="own"))
    assert row.speedup == pytest.approx(2.0)
    assert (row.speedup_basis, row.same_clock) == ("calibration", 0)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
        assert db.execute("SELECT plain_basis FROM generations ORDER BY id").fetchall() == [
            ("",),
            ("own",),
        ]


def test_metrics_label_a_speedup_from_the_calibration_alone() -> None:
    metrics = ServerMetrics()
    metrics.observe(made(drafted=4, accepted=2, plain_itl_s=0.05, plain_basis="calibration"))
    metrics.observe(made(route="infill", drafted=4, plain_itl_s=0.2, plain_basis="scaled"))
    metrics.observe(made(route="infill", drafted=4, plain_itl_s=0.05, plain_basis="calibration"))
    labelled = [
        (dict(labels), value) for labels, value in samples(metrics, "localspec_speedup").items()
    ]
    speedups = {labels["route"]: (labels["basis"], value) for labels, value in labelled}
    # infill has a same-clock figure: the calibration's is left out of its speed-up
    assert speedups == {"chat": ("calibration_only", 0.5), "infill": ("same_clock", 2.0)}
