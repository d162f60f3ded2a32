"""Acceptance drift alarms against the history's acceptance, per route, pair and source."""

from __future__ import annotations

from localspec.observe.drift import DriftWatch
from localspec.observe.observation import Observation
from localspec.speculative.stats import ProposerStats
from tests.observe.observations import made


def drafted(accepted: int, drafted: int = 100, source: str = "ngram") -> Observation:
    return made(
        generated_tokens=accepted + 10,
        drafted=drafted,
        accepted=accepted,
        by_proposer={source: ProposerStats(10, drafted, accepted)},
    )


def test_a_drop_beyond_the_threshold_raises_one_alarm_until_it_recovers() -> None:
    asked: list[tuple[str, str, str]] = []

    def baseline(route: str, pair: str, source: str) -> float:
        asked.append((route, pair, source))
        return 0.6

    watch = DriftWatch(baseline)
    assert watch.observe(drafted(30)) == []  # 100 drafted: not judged yet
    alarms = watch.observe(drafted(30))  # 200 drafted at 30% against 60%
    assert [(a.source, a.rate, a.baseline, a.drafted) for a in alarms] == [("ngram", 0.3, 0.6, 200)]
    assert "acceptance 30% over the last 200 drafted tokens, against 60%" in alarms[0].detail
    assert watch.alarms() == [("chat", "t+d", "ngram")]
    assert watch.observe(drafted(30)) + watch.observe(drafted(30)) == []  # still low: said once
    assert watch.observe(drafted(50)) + watch.observe(drafted(50)) == []  # back within 30%
    assert watch.alarms() == []
    assert len(watch.observe(drafted(20)) + watch.observe(drafted(20))) == 1  # dropped again
    assert asked == [("chat", "t+d", "ngram")]  # the history is read once per key


def test_a_drop_within_the_threshold_or_without_history_is_no_alarm() -> None:
    assert DriftWatch(lambda *_key: 0.6).observe(drafted(90, drafted=200)) == []  # 45% against 60%
    assert DriftWatch().observe(drafted(0, drafted=200)) == []


def test_sources_are_judged_apart() -> None:
    watch = DriftWatch(lambda _r, _p, source: {"ngram": 0.6, "draft": 0.2}[source])
    assert watch.observe(drafted(40, 200, "draft")) == []  # draft at its usual 20%
    assert [a.source for a in watch.observe(drafted(40, 200, "ngram"))] == ["ngram"]
