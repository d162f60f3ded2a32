"""`doctor` says what the history holds: its generations and the last week's guard and drift
events, one line each."""

from __future__ import annotations

import json
import time

from localspec.observe.history import History, default_history_path
from localspec.observe.watch import WatchEvent
from tests.observe.observations import made
from tests.test_cli import localspec

DAY_S = 86_400.0


def test_doctor_reports_the_history() -> None:
    path = default_history_path()
    none_yet = localspec("doctor")
    assert none_yet.returncode == 0, none_yet.stderr
    assert f"history: none yet in {path}: serve, chat and complete write it" in none_yet.stdout

    now = time.time()
    with History(path) as history:
        for _ in range(3):
            history.record(made())
        history.record_event(WatchEvent("fallback", "chat", "t+d", "cost", "4.0 rejected"))
        history.record_event(WatchEvent("drift", "chat", "t+d", "ngram", "acceptance 10%"))
        history.record_event(WatchEvent("probe", "chat", "t+d", "", "old"), at=now - 30 * DAY_S)

    report = json.loads(localspec("doctor", "--json").stdout)["history"]
    assert (report["file"], report["generations"], report["error"]) == (str(path), 3, None)
    assert [(e["kind"], e["source"]) for e in report["events"]] == [
        ("fallback", "cost"),
        ("drift", "ngram"),
    ]  # the probe is older than a week

    text = localspec("doctor").stdout.splitlines()
    start = text.index(f"history: 3 generations in {path} (localspec stats)")
    assert text[start + 1] == "guard and drift events in the last 7 days: 2"
    assert text[start + 2].endswith("chat (t+d): fallback (cost): 4.0 rejected")
    assert text[start + 3].endswith("chat (t+d): drift (ngram): acceptance 10%")


def test_doctor_names_a_history_that_is_not_one() -> None:
    path = default_history_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database, " * 512)
    result = localspec("doctor", "--json")
    assert result.returncode == 0, result.stderr
    assert "is not a localspec history" in json.loads(result.stdout)["history"]["error"]
    text = localspec("doctor").stdout
    assert f"history: history file {path} is not a localspec history" in text
