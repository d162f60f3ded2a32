"""Drift on the tiny models: a later process whose acceptance drops mid-stream, against the
history an earlier process recorded, raises one alarm: logged, exported and recorded."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from localspec import Runtime, RuntimeSettings, SpecMode
from localspec.observe.history import History
from localspec.server.metrics import ServerMetrics
from tests.observe.scripted import Scripted, finish

TOKENS = 41  # 40 after the first: 40 drafted tokens a request when every draft is rejected


def _settings(tiny_target: Path, history: Path) -> RuntimeSettings:
    return RuntimeSettings(tiny_target, n_ctx=512, n_threads=1, cache_ram_mib=0, history=history)


def test_acceptance_dropped_mid_stream_raises_one_alarm(tiny_target: Path, tmp_path: Path) -> None:
    history_file = tmp_path / "history.sqlite3"
    with Runtime(_settings(tiny_target, history_file)) as earlier:
        plain = finish(earlier, SpecMode.OFF, max_tokens=TOKENS)
        right = Scripted(plain.tokens, earlier.models.target_model.n_vocab, right=True)
        for _ in range(3):
            assert finish(earlier, SpecMode.NGRAM, right, TOKENS).stats.accepted > 0
    with Runtime(_settings(tiny_target, history_file)) as later:
        metrics = ServerMetrics()
        metrics.attach(later.watch)
        wrong = Scripted(plain.tokens, later.models.target_model.n_vocab, right=False)
        assert later.watch.drift is not None
        for scripted in (right, right, right, right):
            finish(later, SpecMode.NGRAM, scripted, TOKENS)  # as before: no alarm
        assert later.watch.drift.alarms() == []
        dropped = 0
        while not later.watch.drift.alarms():  # the drop: every draft rejected from here
            finish(later, SpecMode.NGRAM, wrong, TOKENS)
            dropped += 1
            assert dropped <= 10, "no alarm after 400 rejected draft tokens"
        assert later.watch.drift.alarms() == [("chat", later.watch.pair, "ngram")]
        exposition = metrics.exposition().decode()
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }
    assert samples["localspec_drift_alarms_total"].value == 1
    assert samples["localspec_drift_alarm"].labels["source"] == "ngram"
    with History(history_file) as history:
        events = history.events(days=2)
    assert [(e.kind, e.route, e.source) for e in events] == [("drift", "chat", "ngram")]
    assert events[0].detail.endswith("against 100% in the history")
