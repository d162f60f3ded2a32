"""Facts about this machine that need no llama.cpp: the compiler flags its CPU needs and what
`nvidia-smi` says. Kept free of llama.cpp imports: the commands that rebuild llama.cpp must
run while the installed one cannot load."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

_log = logging.getLogger(__name__)

# the same flags as .ci/run: some virtual machines list AMX without enabling it, and a native
# build then dies in its first quantized matrix product (docs/gpu.md)
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
_SMI_TIMEOUT_S = 5.0  # the driver may take a second to wake


def cpu_lists_amx() -> bool:
    """Whether /proc/cpuinfo lists AMX (Linux; elsewhere, no)."""
    try:
        return "amx_int8" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def nvidia_smi(*args: str) -> list[str]:
    """The lines `nvidia-smi ARGS` prints, or none where it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run(
            [smi, *args], capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _log.debug("nvidia-smi %s failed: %s", " ".join(args), exc)
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []
