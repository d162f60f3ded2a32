"""The watch never fails an answer: a listener or a history that breaks is logged."""

from __future__ import annotations

import pytest

from localspec.observe.drift import DriftWatch
from localspec.observe.observation import Observation
from localspec.observe.watch import Watch
from tests.observe.observations import ngram_stats


def test_a_failing_listener_and_baseline_leave_the_answer_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_baseline(_route: str, _pair: str, _source: str) -> float:
        raise OSError("disk full")

    def broken_listener(_observation: Observation) -> None:
        raise RuntimeError("listener")

    heard: list[Observation] = []
    watch = Watch("t+d", drift=DriftWatch(broken_baseline, min_drafted=10))
    watch.listeners += [broken_listener, heard.append]
    observation = watch.finish(
        ngram_stats(300, 2), route="chat", mode="ngram", chunk_times=[0.0, 1.0]
    )
    assert heard == [observation]  # the listener after the broken one still heard it
    failures = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("guard failed" in m for m in failures)
    assert any("watcher failed" in m for m in failures)
