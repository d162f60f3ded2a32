"""Process-wide llama.cpp set-up: backend initialisation and routing C logging to `logging`.

llama.cpp prints loader chatter to stderr by default, which would pollute `complete`'s output
and the TUI; here it goes to the `localspec.llama.cpp` logger, at DEBUG unless it is an error.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import llama_cpp
import llama_cpp.llama_cpp as lc

_log = logging.getLogger("localspec.llama.cpp")

# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5
_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.DEBUG, 4: logging.ERROR}


# llama.cpp's error lines for a decode its abort callback stopped (ggml's status 1, llama_decode's
# 2): localspec asked for the stop (`localspec.llama.pieces.abortable`), so they are no error
_ABORTED_LINES = frozenset(
    {
        "graph_compute: ggml_backend_sched_graph_compute_async failed with error 1",
        "process_ubatch: failed to compute graph, compute status: 1",
        "llama_decode: failed to decode, ret = 2",
    }
)


def _forward_log(level: int, text: bytes | None, _user_data: Any) -> None:
    if text:
        line = text.decode("utf-8", "replace").rstrip()
        if line in _ABORTED_LINES:
            level = 1
        _log.log(_LEVELS.get(level, logging.DEBUG), "%s", line)


@dataclass(frozen=True)
class BuildInfo:
    """What the llama.cpp build underneath can do, for `doctor` and the statistics record."""

    llama_cpp_python: str
    gpu_offload: bool
    system_info: str


@cache
def _callback() -> Any:
    # Kept alive by the cache: ctypes callbacks must outlive every C call that may log.
    return lc.llama_log_callback(_forward_log)


@cache
def init_backend() -> None:
    """Initialise llama.cpp once per process and route its logs (idempotent)."""
    lc.llama_log_set(_callback(), ctypes.c_void_p(0))
    lc.llama_backend_init()


def set_fields(params: Any, **values: Any) -> None:
    """Assign ctypes struct fields, refusing names the struct lacks.

    ctypes silently accepts unknown attributes, so a field renamed between llama.cpp versions
    (`use_mmap` became `load_mode`) would otherwise be ignored without a trace.
    """
    known = {name for name, *_ in type(params)._fields_}
    for name, value in values.items():
        if name not in known:
            raise AttributeError(f"{type(params).__name__} has no field {name!r}")
        setattr(params, name, value)


def build_info() -> BuildInfo:
    init_backend()
    return BuildInfo(
        llama_cpp_python=llama_cpp.__version__,
        gpu_offload=bool(lc.llama_supports_gpu_offload()),
        system_info=lc.llama_print_system_info().decode("utf-8", "replace").strip(),
    )


WhichLogits = Literal["none", "last", "all"]
"""Which logits rows a decode asks for: none, the last token's, or every token's."""


def fill_batch(batch: Any, tokens: Sequence[int], first: int, *, rows: WhichLogits) -> int:
    """Put `tokens` at positions `first`... of sequence 0 into `batch`, asking logits for
    `rows`: "all", "last" (the last token's) or "none"; the number of rows asked for."""
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = first + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = rows == "all" or (rows == "last" and i == len(tokens) - 1)
    batch.n_tokens = len(tokens)
    return len(tokens) if rows == "all" else int(rows == "last" and bool(tokens))


def bytes_pointer(data: bytearray) -> ctypes.Array[ctypes.c_uint8]:
    """`data` as the `uint8_t *` llama.cpp's state functions take, without a copy.

    An array over the buffer, not `ctypes.cast` to a pointer: a cast result refers to itself
    through its `_objects`, so every saved state (tens to hundreds of MB) stayed in memory
    until Python's cycle collector happened to run.
    """
    return (ctypes.c_uint8 * len(data)).from_buffer(data)


@dataclass
class DecodeTimes:
    """Running nanoseconds a context spent inside `llama_decode` and copying logits out (the
    engine reads them through its `DecodeTimings` protocol to profile its steps)."""

    decode_ns: int = 0
    logits_ns: int = 0
