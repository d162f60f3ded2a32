"""Errors as the app shows them: one line in a notification, a bug's trace in the log file.

A `LocalspecError` already says what to do. Anything else is a bug: the app outlives it with
the conversation intact, says so in one line and keeps the trace for the bug report. While the
app owns the terminal, log records go to a file (`divert_logging`): a line written to stderr
would tear the screen.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs

from localspec import LocalspecError
from localspec.paths import open_private, private_folder

_log = logging.getLogger("tui")


def log_file() -> Path:
    """Where `localspec chat` writes its log (llama.cpp's too, with --verbose)."""
    return platformdirs.user_log_path("localspec") / "chat.log"


def error_line(exc: Exception, doing: str) -> str:
    """The notification for `exc`, raised while `doing` something; a bug's trace is logged."""
    if isinstance(exc, LocalspecError):
        return str(exc)
    _log.error("unexpected error while %s", doing, exc_info=exc)
    lines = str(exc).strip().splitlines()
    what = type(exc).__name__ + (f": {lines[0]}" if lines else "")
    return f"unexpected error while {doing} ({what}); the trace is in {log_file()}"


@contextmanager
def divert_logging(path: Path) -> Iterator[None]:
    """Log to `path` instead of the terminal while the block runs (the app's lifetime).

    The handlers `logging.basicConfig` put on the root logger write to stderr, and so does
    logging's last resort when there are none: both are replaced by a file handler, and
    the terminal's handlers come back afterwards.
    """
    root = logging.getLogger()
    terminal = [
        handler
        for handler in root.handlers
        if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.__stderr__)
    ]
    private_folder(path.parent)  # the log quotes the user's code: private, never a link
    stream = open(open_private(path, append=True), "a", encoding="utf-8")  # noqa: SIM115
    to_file = logging.StreamHandler(stream)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for handler in terminal:
        root.removeHandler(handler)
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        stream.close()
        for handler in terminal:
            root.addHandler(handler)
