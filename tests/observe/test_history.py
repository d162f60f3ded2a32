"""The history file: private, bounded by rows, summarised per day, safe to share between threads,
and never the reason an answer fails."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import pytest

from localspec.observe.drift import DriftWatch
from localspec.observe.history import (
    History,
    NoHistory,
    default_history_path,
)
from localspec.observe.history_file import APPLICATION_ID, SCHEMA, HistoryError
from localspec.observe.watch import Watch, WatchEvent
from localspec.paths import data_dir
from localspec.speculative.stats import ProposerStats
from tests.observe.observations import made, ngram_stats


def local(day: int, hour: int) -> float:
    """The unix time of a local hour in May 2024 (the summary's days are local dates)."""
    return datetime(2024, 5, day, hour).timestamp()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


def test_the_file_is_private_from_its_first_byte(tmp_path: Path) -> None:
    path = tmp_path / "data" / "history.sqlite3"
    old_umask = os.umask(0)  # the mode comes from how the file is created, not from the umask
    try:
        history = History(path)
        history.record(made(), at=local(1, 10))
    finally:
        os.umask(old_umask)
    assert mode_of(path.parent) == 0o700
    for suffix in ("", "-wal", "-shm"):
        assert mode_of(path.with_name(path.name + suffix)) == 0o600, suffix
    history.close()


def test_an_existing_file_readable_by_others_is_made_private_again(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    History(path).close()
    path.chmod(0o644)
    History(path).close()
    assert mode_of(path) == 0o600


def test_the_default_file_is_in_the_data_folder() -> None:
    assert default_history_path() == data_dir() / "history.sqlite3"
    History.open().close()
    assert mode_of(data_dir()) == 0o700


def test_the_newest_max_rows_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path, max_rows=10)
    for i in range(25):
        history.record(made(), at=float(i))
        history.record_event(WatchEvent("probe", "chat", "t+d", "", ""), at=float(i))
    assert history.generations() == 10
    assert rows(path, "SELECT min(at), max(at) FROM generations") == [(15.0, 24.0)]
    assert rows(path, "SELECT count(*), min(at) FROM events") == [(10, 15.0)]
    history.close()
    smaller = History(path, max_rows=4)  # a lower bound applies from the next row
    smaller.record(made(), at=25.0)
    assert smaller.generations() == 4
    smaller.close()


def test_another_process_holding_the_lock_costs_one_wait_not_one_per_answer(
    tmp_path: Path,
) -> None:
    """A row waits for another process's write lock (then is skipped) once; the rows after
    it within the backoff are skipped without waiting; after it, rows wait (and land) again.
    The issue measured ~1 s of waiting on every answer while a lock was held."""
    path = tmp_path / "history.sqlite3"
    now = [0.0]
    history = History(path, clock=lambda: now[0])
    history.record(made(), at=1.0)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing, and slow about it
    for at in (2.0, 3.0, 4.0):
        history.record(made(), at=at)
    assert history.lock_waits == 1
    now[0] += 30.0
    history.record(made(), at=5.0)
    assert history.lock_waits == 1  # still within the backoff: no wait
    other.execute("COMMIT")
    other.close()
    history.record(made(), at=6.0)  # the lock is free: written at once, backoff or not
    now[0] += 60.0
    history.record(made(), at=7.0)
    assert history.lock_waits == 1
    assert history.generations() == 3
    history.close()
    assert rows(path, "SELECT at FROM generations ORDER BY at") == [(1.0,), (6.0,), (7.0,)]


def test_a_row_holds_the_generation_and_its_gaps_p95(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    gaps = tuple(0.01 * i for i in range(1, 21))  # 20 gaps: the p95 is the 19th
    by_proposer = {"ngram": ProposerStats(3, 6, 4), "draft": ProposerStats(1, 2, 0)}
    history.record(made(gaps=gaps, by_proposer=by_proposer, guard="latency"), at=1.0)
    history.record(made(), at=2.0)
    history.close()
    stored = rows(path, "SELECT guard, gap_p95_s, sources, itl_s FROM generations ORDER BY at")
    assert stored[0][:2] == ("latency", pytest.approx(0.19))
    assert stored[0][2] == (
        '{"draft": {"accepted": 0, "drafted": 2, "steps": 1}, '
        '"ngram": {"accepted": 4, "drafted": 6, "steps": 3}}'
    )
    assert stored[0][3] == pytest.approx(0.1)  # 1 s over the 10 tokens after the first
    assert stored[1][1] is None  # no gaps: no p95


def _summary_history(path: Path) -> History:
    """Known figures over three days; the summary's numbers are worked out in the test."""
    history = History(path)
    infill = {"route": "infill", "mode": "auto", "plain_basis": "recent"}
    # four auto requests on infill on May 1: time per token 0.1, 0.2 and 0.3 s, and one token
    history.record(
        made(**infill, generation_s=1.0, drafted=10, accepted=8, target_steps=5, plain_itl_s=0.3),
        at=local(1, 9),
    )
    history.record(
        made(**infill, generation_s=2.0, drafted=10, accepted=2, target_steps=5, plain_itl_s=0.3),
        at=local(1, 10),
    )
    history.record(made(**infill, generation_s=3.0), at=local(1, 11))  # no plain estimate
    history.record(
        made(**infill, generated_tokens=1, generation_s=0.0, target_steps=1, plain_itl_s=0.3),
        at=local(1, 12),
    )
    off = {"route": "infill", "mode": "off", "plain_itl_s": 0.1, "plain_basis": "own"}
    history.record(made(**off), at=local(1, 13))
    # an editor's request interrupted it: in the ITL percentiles, not in the speed-up
    history.record(made(**off, generation_s=9.0, interruptions=1), at=local(1, 13))
    history.record(made(route="chat"), at=local(2, 9))
    history.record(made(route="chat"), at=datetime(2024, 4, 30, 23).timestamp())  # too old
    for kind, route, day in (
        ("fallback", "infill", 1),
        ("drift", "infill", 1),
        ("probe", "infill", 1),  # a probe is no fallback: counted in neither column
        ("fallback", "chat", 2),
    ):
        history.record_event(WatchEvent(kind, route, "t+d", "", kind), at=local(day, 14))
    return history


def test_the_summary_per_day_route_pair_and_mode(tmp_path: Path) -> None:
    history = _summary_history(tmp_path / "history.sqlite3")
    now = local(2, 18)
    summary = history.summary(days=2, now=now)
    assert [(s.day, s.route, s.mode, s.requests) for s in summary] == [
        ("2024-05-01", "infill", "auto", 4),
        ("2024-05-01", "infill", "off", 2),
        ("2024-05-02", "chat", "auto", 1),
    ]
    auto = summary[0]
    assert asdict(auto) == {
        "day": "2024-05-01",
        "route": "infill",
        "pair": "t+d",
        "mode": "auto",
        "requests": 4,
        "generated": 34,
        "drafted": 20,
        "accepted": 10,
        "steps": 21,
        "acceptance": 0.5,
        "tokens_per_step": pytest.approx(34 / 21),
        # plain decoding's 0.3 s for each of 10 tokens after the first, in two requests,
        # against the 1 + 2 s they took; the one without an estimate and the one token aside
        "speedup": pytest.approx(6.0 / 3.0),
        "speedup_basis": "same-clock",
        "estimated": 2,
        "same_clock": 2,
        "itl_p50_s": pytest.approx(0.2),  # nearest rank of 0.1, 0.2, 0.3
        "itl_p95_s": pytest.approx(0.3),
        "guard_events": 1,
        "drift_events": 1,
    }
    off = summary[1]
    assert off.acceptance is None and off.speedup == pytest.approx(1.0)
    assert off.itl_p95_s == pytest.approx(0.9)
    assert (off.guard_events, off.drift_events) == (1, 1)  # the route's, on each mode's row
    chat = summary[2]
    assert chat.speedup is None and (chat.guard_events, chat.drift_events) == (1, 0)
    assert (chat.speedup_basis, chat.estimated, chat.same_clock) == ("", 0, 0)

    assert [(s.day, s.route) for s in history.summary(days=1, now=now)] == [("2024-05-02", "chat")]
    by_route = history.summary(days=2, now=now, by=("route",))
    assert [(s.route, s.pair, s.mode, s.requests) for s in by_route] == [
        ("infill", "", "", 6),
        ("chat", "", "", 1),
    ]
    assert [(e.kind, e.route) for e in history.events(days=1, now=now)] == [("fallback", "chat")]
    assert len(history.events(days=2, now=now)) == 4
    history.close()


def test_a_file_that_is_not_a_history_never_stops_an_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"not a database, " * 512)
    with caplog.at_level(logging.WARNING, logger="localspec.observe.history"):
        history = History.open(path)
    assert isinstance(history, NoHistory)
    assert [r.getMessage() for r in caplog.records] == [
        f"history file {path} is not a localspec history (file is not a database): move it "
        f"away; generations are not recorded"
    ]
    with pytest.raises(HistoryError, match=r"is not a localspec history .* move it away"):
        History.existing(path)
    with sqlite3.connect(tmp_path / "other.sqlite3") as other:
        other.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(HistoryError, match=r"not a localspec history \(it holds other tables\)"):
        History.existing(tmp_path / "other.sqlite3")
    assert History.existing(tmp_path / "missing.sqlite3") is None


def test_a_history_from_a_newer_localspec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    History(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(HistoryError, match="written by a newer localspec"):
        History(path)


def test_a_history_of_schema_2_loses_its_near_ties_column_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    """Schema 2 counted near-ties re-decoded alone, which verification no longer makes: a
    reader reads such a file as it is, the writer drops the column (and could not insert a
    row into the old table, whose near_ties has no default)."""
    path = tmp_path / "history.sqlite3"
    old_table = "steps INTEGER NOT NULL,\n    near_ties INTEGER NOT NULL,"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA.replace("steps INTEGER NOT NULL,", old_table))
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("PRAGMA user_version = 2")
        db.execute(
            'INSERT INTO generations (id, at, route, pair, mode, "constraint", generated, '
            "drafted, accepted, steps, near_ties, ttft_s, prefill_s, generation_s, draft_s, "
            "queue_s, itl_s, plain_itl_s, guard, sources, interruptions) VALUES (7, ?, 'chat', "
            "'t+d', 'auto', 'none', 11, 4, 2, 10, 1, 0.1, 0.1, 1.0, 0.0, 0.0, 0.1, 0.0, '', "
            "'{}', 0)",
            (local(1, 9),),
        )
    reader = History.existing(path)
    assert reader is not None
    with reader:
        (day,) = reader.summary(days=3, now=local(1, 12))
    assert (day.requests, day.drafted, day.accepted) == (1, 4, 2)
    assert rows(path, "PRAGMA user_version") == [(2,)]  # read as it is
    with History(path) as history:
        history.record(made(drafted=6, accepted=3), at=local(1, 10))
        (day,) = history.summary(days=3, now=local(1, 12))
    assert (day.requests, day.drafted, day.accepted) == (2, 10, 5)
    assert rows(path, "PRAGMA user_version") == [(3,)]
    columns = [row[1] for row in rows(path, "PRAGMA table_info(generations)")]
    assert "near_ties" not in columns and "plain_basis" in columns
    assert rows(path, "SELECT id, drafted FROM generations ORDER BY id") == [(7, 4), (8, 6)]
    indexes = rows(path, "SELECT name FROM sqlite_master WHERE type = 'index'")
    assert sorted(indexes) == [("events_by_time",), ("generations_by_time",)]


def test_a_failed_write_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE generations")
    with caplog.at_level(logging.WARNING, logger="localspec.observe.history"):
        history.record(made())
        history.record(made())
    assert len(caplog.records) == 1 and "cannot write to the history file" in caplog.text
    history.close()


def test_two_threads_write_all_their_rows(tmp_path: Path) -> None:
    history = History(tmp_path / "history.sqlite3")
    per_thread = 200

    def write(route: str) -> None:
        for _ in range(per_thread):
            history.record(made(route=route))

    threads = [threading.Thread(target=write, args=(route,)) for route in ("chat", "infill")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert history.generations() == 2 * per_thread
    assert {s.route: s.requests for s in history.summary(days=2)} == {
        "chat": per_thread,
        "infill": per_thread,
    }
    history.close()


def test_an_attached_history_hears_the_watch(tmp_path: Path) -> None:
    history = History(tmp_path / "history.sqlite3")
    drift = DriftWatch(lambda *_key: 0.9, min_drafted=10)
    watch = Watch("t+d", drift=drift, surface="complete")
    history.attach(watch)
    watch.finish(ngram_stats(20, 2), route="complete", mode="ngram", chunk_times=[0.0, 0.5, 1.0])
    assert history.generations() == 1
    [event] = history.events(days=2)
    assert (event.kind, event.route, event.source) == ("drift", "complete", "ngram")
    assert "complete (t+d): drift (ngram): acceptance 10%" in event.line
    history.close()
    nothing = Watch("t+d")
    NoHistory().attach(nothing)
    assert (nothing.listeners, nothing.event_listeners) == ([], [])
