"""The history of generations on disk, for `localspec stats` and `doctor`: what each finished
generation showed (an `Observation`) and the guard's and drift watch's events, over days.

One SQLite file in the data folder, the user's alone: the folder is 0700 and the file is
created 0600 before SQLite opens it (SQLite gives its -wal and -shm files the file's mode).
WAL with synchronous=NORMAL, because the server writes from its generation thread and a commit
there must not wait for the disk; a power cut may lose the last rows, an acceptable loss for a
history. The file keeps the newest `max_rows` generations and as many events: each insert
deletes the rows that fell out of that window, one range of ids.

The history only watches: a file that cannot be opened is one warning and no history
(`History.open` returns a `NoHistory`), and a write that fails is logged once while answers go
on. `localspec stats` reads the same file and says in one line when it cannot.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, NamedTuple

from localspec.errors import LocalspecError
from localspec.observe.guard import percentile
from localspec.observe.history_file import (
    HistoryError,
    connect,
    unusable,
    well_formed,
)
from localspec.observe.observation import Observation
from localspec.observe.plain import PlainReference, same_clock
from localspec.observe.watch import Watch, WatchEvent
from localspec.paths import data_dir

_log = logging.getLogger(__name__)

MAX_ROWS = 100_000
_GENERATION_COLUMNS = (
    'at, route, pair, mode, "constraint", generated, drafted, accepted, steps, '
    "ttft_s, prefill_s, generation_s, draft_s, queue_s, itl_s, plain_itl_s, guard, gap_p95_s, "
    "sources, interruptions, plain_basis"
)
_EVENT_COLUMNS = "at, kind, route, pair, source, detail"
_BUSY_S = 1.0  # another localspec process writing: wait this long, then skip the row
# after a row was skipped for a lock another process held, rows are written without waiting
# for this long: a process that keeps the lock costs each answer nothing, not a second each
_BUSY_BACKOFF_S = 60.0

Key = Literal["route", "pair", "mode"]
ALL_KEYS: tuple[Key, ...] = ("route", "pair", "mode")


def default_history_path() -> Path:
    return data_dir() / "history.sqlite3"


@dataclass(frozen=True)
class Summary:
    """One day's generations on one route, pair and mode (a key left out of `by` is "").

    `speedup` is plain decoding's estimated time over the measured one, summed over the
    requests that ran uninterrupted (one a server paused for an editor's request took that
    request's time too) and whose estimate was measured on their own clock (`same_clock` of
    the `estimated` ones; `speedup_basis` "same-clock"); on a day with none of those, over
    the requests estimated from the calibration alone, `speedup_basis` "calibration": a
    figure from another hour's clock, which `stats` labels (`localspec.observe.plain`). The
    ITL percentiles count every request, as its client met it; `guard_events` (fallbacks)
    and `drift_events` are the route and pair's that day, the same on each of its modes' rows.
    """

    day: str  # the local date, ISO
    route: str
    pair: str
    mode: str
    requests: int
    generated: int
    drafted: int
    accepted: int
    steps: int
    acceptance: float | None  # accepted / drafted (None: nothing drafted)
    tokens_per_step: float | None
    speedup: float | None  # None: no request with a plain-decoding estimate
    speedup_basis: str  # "same-clock", "calibration", "" (no speed-up)
    estimated: int  # requests with a plain-decoding estimate, counted in the speed-up
    same_clock: int  # of them, estimated on their own clock
    itl_p50_s: float | None  # of the requests' mean time per token (None: none had two)
    itl_p95_s: float | None
    guard_events: int
    drift_events: int


@dataclass(frozen=True)
class HistoryEvent:
    """A guard's decision ("fallback", "probe") or a drift alarm ("drift"), as recorded."""

    at: float
    kind: str
    route: str
    pair: str
    source: str
    detail: str

    @property
    def line(self) -> str:
        """The event in one line: when, where, what (a fallback's source is its rule)."""
        when = datetime.fromtimestamp(self.at).strftime("%Y-%m-%d %H:%M")
        what = f"{self.kind} ({self.source})" if self.source else self.kind
        return f"{when} {self.route} ({self.pair}): {what}: {self.detail}"


class _Generation(NamedTuple):
    at: float
    route: str
    pair: str
    mode: str
    generated: int
    drafted: int
    accepted: int
    steps: int
    generation_s: float
    itl_s: float
    plain_itl_s: float
    interruptions: int
    plain_basis: str


_GENERATION_KINDS = "tsssiiiifffis"  # _Generation's fields, as `well_formed` reads them


def _since(days: int, now: float | None) -> float:
    """The unix time of local midnight starting the last `days` days (today the last)."""
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    return datetime.combine(today - timedelta(days=days - 1), datetime.min.time()).timestamp()


def _day(at: float) -> str:
    return datetime.fromtimestamp(at).date().isoformat()


class History:
    """The history file, shared by threads (one connection behind a lock). Opening it raises
    `HistoryError` when it is not a localspec history; `open` turns that into a warning."""

    def __init__(
        self,
        path: Path,
        max_rows: int = MAX_ROWS,
        *,
        create: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.max_rows = max_rows
        self._db, version = connect(path, create=create, busy_s=_BUSY_S)
        self.empty = version == 0  # a reader's empty file: nothing written yet
        self._lock = threading.Lock()
        self._warned = False
        self._clock = clock
        self._hurried_until = -float("inf")  # no waiting for the lock until then
        self.lock_waits = 0  # rows that waited for another process's lock and were skipped

    @classmethod
    def open(cls, path: Path | None = None, max_rows: int = MAX_ROWS) -> History | NoHistory:
        """The history to write to, or, when the file cannot be used, one warning and a
        `NoHistory`: watching must never stop an answer."""
        path = path or default_history_path()
        try:
            return cls(path, max_rows)
        except LocalspecError as exc:
            _log.warning("%s; generations are not recorded", exc)
            return NoHistory()

    @classmethod
    def existing(cls, path: Path) -> History | None:
        """The history at `path` to read (never written: another program's database is
        refused untouched), None when there is none yet (no file, or an empty one)."""
        if not os.path.lexists(path):
            return None
        history = cls(path, create=False)
        if history.empty:
            history.close()
            return None
        return history

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def attach(self, watch: Watch) -> None:
        """Record every generation and guard or drift event of `watch`, judge its drift
        (unless it has a baseline of its own) against what the file held before now, and
        give its plain-decoding estimates the plain figures of the last minutes (processes
        before this one: `complete` runs one request a process)."""
        self._seed_plain(watch.plain)
        watch.listeners.append(self.record)
        watch.event_listeners.append(self.record_event)
        if watch.drift is not None and watch.drift.baseline is None:
            before = time.time()
            watch.drift.baseline = lambda route, pair, source: self.acceptance(
                route, pair, source, before=before
            )

    def _seed_plain(self, plain: PlainReference) -> None:
        """Plain decoding's own figures within `plain`'s window, oldest first."""
        try:
            rows = self._select(
                "SELECT route, pair, plain_itl_s, at FROM generations WHERE at >= ? "
                "AND plain_basis = 'own' AND interruptions = 0 AND generated >= 2 "
                "ORDER BY at, id",
                (plain.clock() - plain.window_s,),
            )
        except HistoryError as exc:
            _log.warning("the history's recent plain decoding cannot be read (%s)", exc)
            return
        for route, pair, itl_s, at in rows:
            # a file written by hand may hold text where figures belong: such rows tell nothing
            if isinstance(itl_s, float) and isinstance(at, float) and math.isfinite(itl_s):
                plain.add(str(route), str(pair), itl_s, at)

    def acceptance(self, route: str, pair: str, source: str, *, before: float) -> float | None:
        """A source's share of accepted draft tokens on a route and pair, over the
        generations recorded before `before` (None: it never drafted there)."""
        try:
            rows = self._select(
                "SELECT sources FROM generations WHERE route = ? AND pair = ? AND at < ?",
                (route, pair, before),
            )
            drafted = accepted = 0
            for (sources,) in rows:
                counts = json.loads(sources).get(source)
                if counts:
                    drafted += int(counts["drafted"])
                    accepted += int(counts["accepted"])
        except (HistoryError, ValueError, KeyError, TypeError, AttributeError) as exc:
            _log.warning("the history's acceptance cannot be read (%s): no drift alarm", exc)
            return None
        return accepted / drafted if drafted else None

    def record(self, observation: Observation, at: float | None = None) -> None:
        """Record a finished generation (`at`: its unix time, default now)."""
        o = observation
        sources = {source: asdict(counts) for source, counts in o.by_proposer.items()}
        self._insert(
            "generations",
            _GENERATION_COLUMNS,
            (
                time.time() if at is None else at,
                o.route,
                o.pair,
                o.mode,
                o.constraint,
                o.generated_tokens,
                o.drafted,
                o.accepted,
                o.target_steps,
                o.ttft_s,
                o.prefill_s,
                o.generation_s,
                o.draft_s,
                o.queue_s,
                o.itl_s,
                o.plain_itl_s,
                o.guard,
                percentile(o.gaps, 95) if o.gaps else None,
                json.dumps(sources, sort_keys=True),
                o.interruptions,
                o.plain_basis,
            ),
        )

    def record_event(self, event: WatchEvent, at: float | None = None) -> None:
        """Record a guard's decision or a drift alarm."""
        at = time.time() if at is None else at
        e = event
        self._insert("events", _EVENT_COLUMNS, (at, e.kind, e.route, e.pair, e.source, e.detail))

    def _insert(self, table: str, columns: str, values: tuple[Any, ...]) -> None:
        """Write a row, or skip it: an answer never waits for the history more than once a
        `_BUSY_BACKOFF_S` (another process holding the write lock made every answer wait
        `_BUSY_S` before)."""
        marks = ", ".join("?" * len(values))
        try:
            with self._lock:
                hurried = self._clock() < self._hurried_until
                wait_ms = 0 if hurried else int(_BUSY_S * 1000)
                self._db.execute(f"PRAGMA busy_timeout = {wait_ms}")
                try:
                    with self._db:
                        insert = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
                        cursor = self._db.execute(insert, values)
                        assert cursor.lastrowid is not None
                        # ids only grow, so the newest max_rows rows are the last max_rows ids
                        stale = cursor.lastrowid - self.max_rows
                        self._db.execute(f"DELETE FROM {table} WHERE id <= ?", (stale,))
                except sqlite3.OperationalError:
                    if not hurried:
                        self.lock_waits += 1
                        self._hurried_until = self._clock() + _BUSY_BACKOFF_S
                    raise
        except sqlite3.Error as exc:
            if not self._warned:
                self._warned = True
                _log.warning(
                    "cannot write to the history file %s (%s): the generations it misses "
                    "are not recorded",
                    self.path,
                    exc,
                )

    def _select(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        try:
            with self._lock:
                return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise unusable(self.path, exc) from exc

    def generations(self) -> int:
        """How many generations the file holds."""
        return int(self._select("SELECT count(*) FROM generations")[0][0])

    def events(self, days: int, now: float | None = None) -> list[HistoryEvent]:
        """The events of the last `days` local days (today included), oldest first."""
        rows = self._select(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE at >= ? ORDER BY at, id",
            (_since(days, now),),
        )
        return [HistoryEvent(*row) for row in rows if well_formed(row, "tsssss")]

    def summary(
        self, days: int, now: float | None = None, by: Sequence[Key] = ALL_KEYS
    ) -> list[Summary]:
        """The last `days` local days (today included), a row per day and the keys in `by`."""
        rows = self._select(
            f"SELECT {', '.join(_Generation._fields)} FROM generations WHERE at >= ?",
            (_since(days, now),),
        )
        groups: defaultdict[tuple[str, ...], list[_Generation]] = defaultdict(list)
        for row in map(_Generation._make, rows):
            if not well_formed(row, _GENERATION_KINDS):
                continue  # a value written by hand, of the wrong type or out of range
            labels = {"route": row.route, "pair": row.pair, "mode": row.mode}
            groups[(_day(row.at), *(labels[k] if k in by else "" for k in ALL_KEYS))].append(row)
        counted: defaultdict[tuple[str, str, str, str], int] = defaultdict(int)
        for event in self.events(days, now):
            route = event.route if "route" in by else ""
            pair = event.pair if "pair" in by else ""
            counted[(_day(event.at), route, pair, event.kind)] += 1
        return [
            _summarise(
                key,
                groups[key],
                guard=counted[(key[0], key[1], key[2], "fallback")],
                drift=counted[(key[0], key[1], key[2], "drift")],
            )
            for key in sorted(groups)
        ]


def _summarise(key: tuple[str, ...], rows: list[_Generation], guard: int, drift: int) -> Summary:
    day, route, pair, mode = key
    generated = sum(r.generated for r in rows)
    drafted = sum(r.drafted for r in rows)
    accepted = sum(r.accepted for r in rows)
    steps = sum(r.steps for r in rows)
    # one token has no time per token: such requests count everywhere but in these
    itls = [r.itl_s for r in rows if r.generated >= 2]
    # a request an editor's interrupted took their time too: no measure of speculation's
    estimated = [r for r in rows if r.generated >= 2 and r.plain_itl_s > 0 and not r.interruptions]
    same = [r for r in estimated if same_clock(r.plain_basis)]
    speedup = _speedup(same or estimated)
    return Summary(
        day=day,
        route=route,
        pair=pair,
        mode=mode,
        requests=len(rows),
        generated=generated,
        drafted=drafted,
        accepted=accepted,
        steps=steps,
        acceptance=accepted / drafted if drafted else None,
        tokens_per_step=generated / steps if steps else None,
        speedup=speedup,
        speedup_basis=("same-clock" if same else "calibration") if speedup is not None else "",
        estimated=len(estimated),
        same_clock=len(same),
        itl_p50_s=percentile(itls, 50) if itls else None,
        itl_p95_s=percentile(itls, 95) if itls else None,
        guard_events=guard,
        drift_events=drift,
    )


def _speedup(rows: list[_Generation]) -> float | None:
    """Plain decoding's estimated seconds over the measured ones (None: no time measured)."""
    plain_s = sum(r.plain_itl_s * (r.generated - 1) for r in rows)
    measured_s = sum(r.generation_s for r in rows)
    return plain_s / measured_s if measured_s > 0 else None


class NoHistory:
    """What `History.open` gives when the file cannot be used: it records nothing."""

    def attach(self, watch: Watch) -> None:
        """Records nothing, so it listens to nothing."""

    def close(self) -> None:
        """Nothing is open."""
