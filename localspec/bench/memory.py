"""Peak resident memory, per benchmark run where the OS allows it.

Linux keeps a resettable high-water mark (`VmHWM`, reset by writing 5 to
`/proc/self/clear_refs`), so each run's peak is measured on its own. Elsewhere only the
process's lifetime peak (`ru_maxrss`) exists, which later runs inherit; the report names the
method so the two are never confused. A llama-server child's peak is its own `VmHWM`.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

PER_RUN = "per-run VmHWM"
LIFETIME = "process lifetime ru_maxrss"


def _vmhwm_bytes(pid: int | str) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def reset_peak() -> bool:
    """Start a new peak for this process; False where only the lifetime peak exists."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_peak_bytes() -> int:
    """This process's peak RSS since the last `reset_peak` (or since it started)."""
    peak = _vmhwm_bytes("self")
    return peak if peak is not None else lifetime_peak_bytes()


def lifetime_peak_bytes() -> int:
    """This process's peak RSS over its whole life (never reset)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # macOS counts bytes, not KiB


def child_peak_bytes(pid: int) -> int | None:
    """A running child's peak RSS, or None where /proc is missing."""
    return _vmhwm_bytes(pid)
