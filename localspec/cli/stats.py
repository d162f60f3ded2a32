"""`localspec stats`: the history that `serve`, `chat` and `complete` write
(`localspec.observe.history`), per day, route, model pair and mode, as a table, JSON or a chart.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from localspec.bench.chart import ensure_available, load_pyplot, save_png
from localspec.observe.history import History, HistoryEvent, Summary, default_history_path


def _or_dash(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def _ms(seconds: float | None) -> str:
    return _or_dash(None if seconds is None else seconds * 1e3, "{:.1f}")


def _speedup(row: Summary) -> str:
    """The speed-up, marked where it rests on the calibration alone (another hour's clock)."""
    figure = _or_dash(row.speedup, "{:.2f}x")
    return f"{figure} calib." if row.speedup_basis == "calibration" else figure


_CALIBRATION_NOTE = (
    "calib.: no request of that row had plain decoding measured on its own clock; its "
    "speed-up compares with the calibration's one-token decode, measured at another time "
    "(a busier or quieter machine moves it): not a measured speed-up"
)

_COLUMNS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("day", lambda r: r.day),
    ("route", lambda r: r.route),
    ("pair", lambda r: r.pair),
    ("mode", lambda r: r.mode),
    ("requests", lambda r: str(r.requests)),
    ("tokens", lambda r: str(r.generated)),
    ("accept %", lambda r: _or_dash(r.acceptance, "{:.0%}")),
    ("tok/step", lambda r: _or_dash(r.tokens_per_step, "{:.2f}")),
    ("speedup", _speedup),
    ("same-clock", lambda r: f"{r.same_clock}/{r.estimated}" if r.estimated else "-"),
    ("p50 ITL ms", lambda r: _ms(r.itl_p50_s)),
    ("p95 ITL ms", lambda r: _ms(r.itl_p95_s)),
    ("guard", lambda r: str(r.guard_events)),
    ("drift", lambda r: str(r.drift_events)),
)
_TEXT_COLUMNS = 4  # left-aligned; the figures after them are right-aligned


def table(rows: Sequence[Summary]) -> list[str]:
    """The rows as lines of fixed-width columns under a header."""
    cells = [[cell(row) for _, cell in _COLUMNS] for row in rows]
    headers = [name for name, _ in _COLUMNS]
    widths = [max(len(name), *(len(line[i]) for line in cells)) for i, name in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(
            value.ljust(width) if i < _TEXT_COLUMNS else value.rjust(width)
            for i, (value, width) in enumerate(zip(values, widths, strict=True))
        ).rstrip()

    return [line(headers), *map(line, cells)]


def write_chart(rows: Sequence[Summary], path: Path) -> None:
    """Two panels over the days, a line per route: the speed-up against plain decoding (a
    cross where it rests on the calibration alone), and the p95 of the requests' time per
    token (rows of `History.summary(by=("route",))`)."""
    pyplot = load_pyplot()
    days = sorted({row.day for row in rows})
    figure, (speed, itl) = pyplot.subplots(
        2, 1, sharex=True, figsize=(max(6.0, 0.7 * len(days) + 3), 6.5)
    )
    for route in sorted({row.route for row in rows}):
        by_day = {row.day: row for row in rows if row.route == route}
        measured = [_speedup_on(by_day.get(d), "same-clock") for d in days]
        calibrated = [_speedup_on(by_day.get(d), "calibration") for d in days]
        p95s = [by_day[d].itl_p95_s if d in by_day else None for d in days]
        (line,) = speed.plot(range(len(days)), measured, marker="o", label=route)
        if not all(map(math.isnan, calibrated)):
            label, color = f"{route} (calibration only)", line.get_color()
            speed.plot(range(len(days)), calibrated, "x", color=color, label=label)
        itl.plot(range(len(days)), [_nan(s) * 1e3 for s in p95s], marker="o", label=route)
    speed.axhline(1.0, color="black", linewidth=0.8)
    speed.set_ylabel("speed-up vs. plain decoding")
    speed.set_title("localspec stats: speculation per day and route")
    speed.legend(fontsize="small")
    itl.set_ylabel("p95 time per token (ms)")
    itl.set_xticks(range(len(days)), days, rotation=30, ha="right")
    save_png(pyplot, figure, path)


def _speedup_on(row: Summary | None, basis: str) -> float:
    """A day's speed-up if it rests on `basis`, else NaN (a gap)."""
    return _nan(row.speedup if row is not None and row.speedup_basis == basis else None)


def _nan(value: float | None) -> float:
    """matplotlib leaves a gap at NaN: a day without the figure."""
    return math.nan if value is None else value


def _print(path: Path, days: int, rows: list[Summary], events: list[HistoryEvent]) -> None:
    if not rows and not events:
        print(f"no generations in the last {days} days in {path}")
        return
    print("\n".join(table(rows)))
    if any(row.speedup_basis == "calibration" for row in rows):
        print(f"\n{_CALIBRATION_NOTE}")
    if events:
        print(f"\nguard and drift events ({len(events)}):")
        for event in events:
            print(f"  {event.line}")


def stats_command(args: argparse.Namespace) -> int:
    if args.chart:
        ensure_available()  # before reading anything
    path: Path = args.history or default_history_path()
    history = History.existing(path)
    rows: list[Summary] = []
    events: list[HistoryEvent] = []
    by_route: list[Summary] = []
    if history is not None:
        with history:
            rows = history.summary(args.days)
            events = history.events(args.days)
            by_route = history.summary(args.days, by=("route",)) if args.chart else []
    if args.json:
        report = {
            "history": str(path),
            "days": args.days,
            "rows": [asdict(row) for row in rows],
            "events": [asdict(event) for event in events],
        }
        print(json.dumps(report, indent=2))
    elif history is None:
        print(f"no history yet in {path}: serve, chat and complete write it as they run")
    else:
        _print(path, args.days, rows, events)
    if args.chart and by_route:
        write_chart(by_route, args.chart)
    elif args.chart:
        print(f"no chart written: no generations in the last {args.days} days", file=sys.stderr)
    return 0
