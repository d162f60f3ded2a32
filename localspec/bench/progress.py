"""Progress on stderr while the benchmark runs; stdout is kept for the report alone.

On a terminal one line is rewritten in place; into a file or pipe (CI logs) each run is a
plain line, since carriage returns there only make the log unreadable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._line_open = False

    def start(self, total: int) -> None:
        self._total, self._done, self._started = total, 0, time.perf_counter()

    def drop(self, runs: int) -> None:
        """Runs that will not happen after all (a baseline failed midway)."""
        self._total -= runs

    def note(self, message: str) -> None:
        """A one-off message (loading a baseline, calibrating) on its own line."""
        self._end_line()
        print(f"localspec bench: {message}", file=self._stream, flush=True)

    def run_done(self, workload: str, mode: str, tokens_per_second: float) -> None:
        self._done += 1
        elapsed = time.perf_counter() - self._started
        eta = elapsed / self._done * (self._total - self._done)
        width = len(str(self._total))
        line = (
            f"[{self._done:>{width}}/{self._total}] {workload:<18} {mode:<20} "
            f"{tokens_per_second:7.1f} tok/s  elapsed {_duration(elapsed)}  eta {_duration(eta)}"
        )
        if self._tty:
            print(f"\r\x1b[K{line}", end="", file=self._stream, flush=True)
            self._line_open = True
        else:
            print(line, file=self._stream, flush=True)

    def finish(self) -> None:
        self._end_line()

    def _end_line(self) -> None:
        if self._line_open:
            print(file=self._stream, flush=True)
            self._line_open = False
