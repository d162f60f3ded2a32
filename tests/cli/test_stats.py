"""`localspec stats`, run as the real command over a history written by hand, in the test's own
data folder."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from localspec.observe.history import History, default_history_path
from localspec.observe.history_file import HistoryError
from localspec.observe.watch import WatchEvent
from tests.observe.observations import made
from tests.test_cli import localspec

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def history() -> Path:
    """Today: two auto requests on infill (10 of 20 drafted tokens accepted, twice plain
    decoding's speed measured beside them) and a plain chat request, and a guard fallback on
    infill."""
    with History(default_history_path()) as written:
        for _ in range(2):
            written.record(
                made(
                    route="infill",
                    drafted=10,
                    accepted=5,
                    target_steps=5,
                    plain_itl_s=0.2,
                    plain_basis="recent",
                )
            )
        written.record(made(route="chat", mode="off"))
        written.record_event(WatchEvent("fallback", "infill", "t+d", "latency", "p95 over plain"))
    return default_history_path()


def test_the_table_has_a_row_per_day_route_pair_and_mode(history: Path) -> None:
    result = localspec("stats")
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == [
        "day", "route", "pair", "mode", "requests", "tokens", "accept", "%", "tok/step",
        "speedup", "same-clock", "p50", "ITL", "ms", "p95", "ITL", "ms", "guard", "drift",
    ]  # fmt: skip
    assert lines[0].split()[1:] == [
        "chat", "t+d", "off", "1", "11", "-", "1.10", "-", "-", "100.0", "100.0", "0", "0",
    ]  # fmt: skip
    assert lines[1].split()[1:] == [
        "infill", "t+d", "auto", "2", "22", "50%", "2.20", "2.00x", "2/2", "100.0", "100.0",
        "1", "0",
    ]  # fmt: skip
    assert "calib." not in result.stdout
    # fixed widths: the last column is right-aligned, so every line ends where the header does
    assert len(lines[0]) == len(lines[1]) == len(header)
    assert "infill (t+d): fallback (latency): p95 over plain" in result.stdout


def test_json_has_the_rows_and_events(history: Path) -> None:
    result = localspec("stats", "--json", "--days", "2")  # 2: the fixture may be yesterday's
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["history"], report["days"]) == (str(history), 2)
    rows = report["rows"]
    figures = [(r["route"], r["requests"], r["speedup"], r["speedup_basis"]) for r in rows]
    assert figures == [("chat", 1, None, ""), ("infill", 2, 2.0, "same-clock")]
    assert [(e["kind"], e["source"]) for e in report["events"]] == [("fallback", "latency")]


def test_chart_writes_a_png(history: Path, tmp_path: Path) -> None:
    chart = tmp_path / "stats.png"
    result = localspec("stats", "--chart", chart)
    assert result.returncode == 0, result.stderr
    assert chart.read_bytes().startswith(PNG_SIGNATURE)


def test_without_a_history_one_line_says_what_writes_it() -> None:
    result = localspec("stats")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"no history yet in {default_history_path()}: serve, chat and complete write it as they run"
    ]
    assert not default_history_path().exists()  # reading makes no file


def test_a_file_that_is_not_a_history_is_one_line_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"not a database, " * 512)
    result = localspec("stats", "--history", path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"localspec: error: history file {path} is not a localspec history (file is not a "
        f"database): move it away"
    ]


def test_complete_writes_the_history_stats_reads_and_no_history_writes_none(
    tiny_target: Path,
) -> None:
    common = ("complete", "--no-server", "--target", tiny_target, "--ctx-size", "256", "--raw")
    run = localspec(*common, "--no-history", "--max-tokens", "4", "hello")
    assert run.returncode == 0, run.stderr
    assert not default_history_path().exists()
    for _ in range(2):
        run = localspec(*common, "--spec", "ngram", "--max-tokens", "6", "hello")
        assert run.returncode == 0, run.stderr
    report = json.loads(localspec("stats", "--json").stdout)
    assert [(r["route"], r["pair"], r["mode"], r["requests"]) for r in report["rows"]] == [
        ("complete", "target", "ngram", 2)
    ]
    assert default_history_path().stat().st_mode & 0o777 == 0o600


def test_a_speedup_from_the_calibration_alone_is_labelled() -> None:
    """A day whose only estimates are the calibration's prints its figure marked, with a
    line saying what that means, and says so in the JSON: never a bare ratio."""
    with History(default_history_path()) as written:
        written.record(
            made(route="chat", drafted=10, accepted=5, plain_itl_s=0.05, plain_basis="calibration")
        )
    result = localspec("stats")
    assert result.returncode == 0, result.stderr
    _, row, _, note = result.stdout.splitlines()
    assert row.split()[8:11] == ["0.50x", "calib.", "0/1"]
    assert note.startswith("calib.: no request of that row had plain decoding measured on its")
    report = json.loads(localspec("stats", "--json").stdout)
    assert [(r["speedup"], r["speedup_basis"], r["same_clock"]) for r in report["rows"]] == [
        (0.5, "calibration", 0)
    ]


def _other_programs_database(path: Path) -> bytes:
    """A SQLite file of another program, in rollback-journal mode; its bytes."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('theirs')")
        db.execute("PRAGMA user_version = 2")  # even a version localspec knows
    return path.read_bytes()


def _journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(path)) as db:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0])


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    """Directly or through a link, nothing is written to it (no WAL switch, no schema)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    theirs = folder / "theirs.db"
    before = _other_programs_database(theirs)
    link = folder / "history.sqlite3"
    link.symlink_to(theirs)
    for path, problem in ((theirs, "not a localspec history"), (link, "symbolic link")):
        result = localspec("stats", "--history", path)
        assert result.returncode == 1, result.stdout
        [line] = result.stderr.splitlines()
        assert problem in line and str(path) in line
        assert theirs.read_bytes() == before and _journal_mode(theirs) == "delete"
        assert sorted(p.name for p in folder.iterdir()) == ["history.sqlite3", "theirs.db"]
    with pytest.raises(HistoryError, match="not a localspec history"):
        History(theirs)  # the writer refuses it as untouched
    assert theirs.read_bytes() == before and _journal_mode(theirs) == "delete"


def test_an_empty_database_is_no_history_and_stays_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = localspec("stats", "--history", empty)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no history yet in")
    assert empty.read_bytes() == b""


def test_odd_values_in_a_history_are_passed_over(history: Path) -> None:
    """A history edited by hand: rows with a value of the wrong type or a time no date can
    show are skipped; the others are summarised as before."""
    with closing(sqlite3.connect(history)) as db, db:
        for table, column, value in (
            ("generations", "generated", "abc"),
            ("generations", "at", 1e300),
            ("generations", "itl_s", "x"),
            ("events", "at", 1e300),
        ):
            names = [row[1] for row in db.execute(f"PRAGMA table_info({table})")][1:]
            copied = ", ".join(f'"{name}"' for name in names)
            db.execute(f"INSERT INTO {table} ({copied}) SELECT {copied} FROM {table} LIMIT 1")
            odd = f'UPDATE {table} SET "{column}" = ? WHERE id = last_insert_rowid()'
            db.execute(odd, (value,))
    for args in ((), ("--json",)):
        result = localspec("stats", "--days", "2", *args)
        assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(r["route"], r["requests"]) for r in report["rows"]] == [("chat", 1), ("infill", 2)]
    assert len(report["events"]) == 1


def test_days_has_an_upper_bound_that_names_itself() -> None:
    result = localspec("stats", "--days", "1000000000")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if "error" in line]
    assert "--days" in line and "at most" in line
