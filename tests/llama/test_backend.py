"""The ctypes helpers every llama.cpp call shares."""

from __future__ import annotations

import gc

from localspec.llama.backend import bytes_pointer


def test_a_state_buffer_is_released_when_the_call_returns() -> None:
    """Saved states are tens to hundreds of MB: the view handed to llama.cpp must not keep
    one alive until Python's cycle collector happens to run (a `ctypes.cast` did, and a
    calibration held four of them at once)."""
    data = bytearray(16)
    gc.disable()
    try:
        view = bytes_pointer(data)
        view[0] = 7
        del view
        data.extend(b"x")  # BufferError while anything still exports the buffer
    finally:
        gc.enable()
    assert data[0] == 7 and len(data) == 17
