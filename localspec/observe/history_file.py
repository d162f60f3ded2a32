"""Opening the history file, and checking what is read from it, for `localspec.observe.history`.

The path may be the user's own choice (`stats --history FILE`) and the file may have been
written by anything, so nothing is written before the file is known to be localspec's: a link
is refused (the writer and `stats` alike), a reader opens it read-only, and the writer changes
nothing (no WAL switch, no schema) in a database of another program. A history carries
localspec's SQLite application id; one from before the id is recognised by its tables.
Rows are read as they are, and a value of the wrong type or out of range (a hand-edited
`generated='abc'`, `at=1e300`) makes its row skipped, not a crash.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.paths import open_private, private_folder

APPLICATION_ID = 0x4C535043  # "LSPC": PRAGMA application_id of a localspec history
SCHEMA_VERSION = 3  # 2: plain_basis; 3: no near_ties
SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    route TEXT NOT NULL,
    pair TEXT NOT NULL,
    mode TEXT NOT NULL,
    "constraint" TEXT NOT NULL,
    generated INTEGER NOT NULL,
    drafted INTEGER NOT NULL,
    accepted INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    ttft_s REAL NOT NULL,
    prefill_s REAL NOT NULL,
    generation_s REAL NOT NULL,
    draft_s REAL NOT NULL,
    queue_s REAL NOT NULL,
    itl_s REAL NOT NULL,
    plain_itl_s REAL NOT NULL,
    guard TEXT NOT NULL,
    gap_p95_s REAL,
    sources TEXT NOT NULL,
    interruptions INTEGER NOT NULL,
    plain_basis TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS generations_by_time ON generations(at);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    route TEXT NOT NULL,
    pair TEXT NOT NULL,
    source TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_time ON events(at);
"""
_OUR_TABLES = {"generations", "events"}
_V1_COLUMNS = {"at", "route", "pair", "mode", "generated", "sources", "interruptions"}
LAST_AT = 253_402_128_000.0
"""9999-12-30: a later time is no date `datetime` can show (and no time a row was written)."""


class HistoryError(LocalspecError):
    """The history file cannot be read or written as a localspec history."""


def connect(path: Path, *, create: bool, busy_s: float) -> tuple[sqlite3.Connection, int]:
    """The history at `path` and its schema version (0: an empty file, no history yet).
    `create`: the writer's open, which makes the folder and the file private (creating
    them) and the schema; a reader opens the file read-only, as it is."""
    try:
        if create:
            private_folder(path.parent)
            os.close(open_private(path, append=True))
            db = sqlite3.connect(path, timeout=busy_s, check_same_thread=False)
        else:
            _refuse_odd(path)
            uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
            db = sqlite3.connect(uri, uri=True, timeout=busy_s, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise HistoryError(
            f"cannot open the history file {path} ({exc}): make it readable or move it away"
        ) from exc
    try:
        version = _identify(db, path)
        if create:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            version = _create_or_upgrade(db, version)
        elif version == 1:  # a reader reads plain_basis: our file, upgraded in place
            db.close()
            return connect(path, create=True, busy_s=busy_s)
    except sqlite3.Error as exc:
        db.close()
        raise unusable(path, exc) from exc
    except HistoryError:
        db.close()
        raise
    return db, version


def _refuse_odd(path: Path) -> None:
    """A link or something other than a regular file is not read: `serve` refuses a linked
    history, and `stats` must not read (and so hold open) a FIFO or device."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise HistoryError(
            f"history file {path} is {what}: localspec reads and writes its history only "
            f"as a regular file, never through a link; give the file itself"
        )


def _identify(db: sqlite3.Connection, path: Path) -> int:
    """The schema version of a localspec history (0: an empty database), read without
    writing anything; anything else is a `HistoryError`."""
    # one statement, one snapshot: a process creating the schema at the same time is seen
    # before or after
    app_id, version, objects = db.execute(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if app_id == 0 and version == 0 and objects == 0:
        return 0
    if app_id != APPLICATION_ID and not (app_id == 0 and _before_the_id(db, version)):
        raise unusable(path, sqlite3.DatabaseError("it holds other tables"))
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"history file {path} was written by a newer localspec (schema {version}, "
            f"this one knows {SCHEMA_VERSION}): upgrade localspec or move it away"
        )
    return int(version)


def _before_the_id(db: sqlite3.Connection, version: int) -> bool:
    """Whether a database without an application id is a history of a localspec that did
    not set one: schema 1 or 2, localspec's tables and no others, the columns it wrote."""
    if version not in (1, 2):
        return False
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables - {"sqlite_sequence"} != _OUR_TABLES:
        return False
    columns = {row[1] for row in db.execute("SELECT * FROM pragma_table_info('generations')")}
    return columns >= _V1_COLUMNS


def _create_or_upgrade(db: sqlite3.Connection, version: int) -> int:
    """The schema created in an empty file, or schema 1 or 2 upgraded (in one write
    transaction, so a process doing the same at the same time is seen before or after), and
    the application id set; the version the file has now."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            for statement in SCHEMA.split(";"):
                db.execute(statement)
        elif version == 1:
            # schema 1 had no plain_basis: its rows' estimates were of no recorded basis, so
            # `stats` counts them as the calibration's (not measured on their own clock)
            db.execute("ALTER TABLE generations ADD COLUMN plain_basis TEXT NOT NULL DEFAULT ''")
        if version in (1, 2):
            _drop_near_ties(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("COMMIT")
    except sqlite3.Error:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _drop_near_ties(db: sqlite3.Connection) -> None:
    """Schemas 1 and 2 counted near-ties re-decoded alone, a re-decode verification no
    longer makes (it decodes exact-width chunks): the table is copied into schema 3's without
    that column, rows and ids kept. A copy rather than `ALTER TABLE ... DROP COLUMN`, which
    SQLite before 3.35 lacks."""
    db.execute("ALTER TABLE generations RENAME TO generations_v2")
    db.execute("DROP INDEX generations_by_time")  # it went with the old table
    for statement in SCHEMA.split(";"):  # the new table and index; events are kept
        db.execute(statement)
    columns = ", ".join(
        f'"{name}"' for (name,) in db.execute("SELECT name FROM pragma_table_info('generations')")
    )
    db.execute(f"INSERT INTO generations ({columns}) SELECT {columns} FROM generations_v2")
    db.execute("DROP TABLE generations_v2")


def unusable(path: Path, exc: sqlite3.Error) -> HistoryError:
    if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
        return HistoryError(f"history file {path} is busy ({exc}): try again")
    return HistoryError(f"history file {path} is not a localspec history ({exc}): move it away")


def well_formed(row: Sequence[object], kinds: str) -> bool:
    """Whether each value of `row` is of its kind: "t" a time (a number a date can show),
    "s" text, "i" an integer, "f" a finite number."""
    return all(_of_kind(value, kind) for value, kind in zip(row, kinds, strict=True))


def _of_kind(value: object, kind: str) -> bool:
    if kind == "s":
        return isinstance(value, str)
    if kind == "i":
        return isinstance(value, int)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return kind == "f" or 0 <= value <= LAST_AT
