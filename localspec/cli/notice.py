"""One-line notices on stderr: what every command tells the user besides its output."""

from __future__ import annotations

import sys


def notice(message: str) -> None:
    """Work the user waits for (calibration, downloads) or a choice made for them (why a
    running server was not used) is announced on stderr, never mixed into stdout."""
    print(f"localspec: {message}", file=sys.stderr)
