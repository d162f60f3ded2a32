"""Checks a GGUF file before llama.cpp sees it, so bad files give a clear error, not a crash.

llama.cpp aborts or reports little on a partial download; walking the header (magic, version,
metadata, tensor table) and comparing the end of the last tensor with the file size catches the
common failures (missing, empty, wrong format, truncated) in milliseconds, without reading
the weights.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.errors import ModelFileError

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
# GGUF value types -> fixed byte size (strings = 8 and arrays = 9 are variable)
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class _TruncatedError(Exception):
    pass


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise _TruncatedError
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int) -> None:
        if kind == _STRING:
            length = self.u64()  # read before `pos +=` evaluates pos
            self.pos += length
        elif kind == _ARRAY:
            item_kind, count = self.u32(), self.u64()
            if item_kind in _SCALAR_SIZES:
                self.pos += _SCALAR_SIZES[item_kind] * count
            else:
                for _ in range(count):
                    self.skip_value(item_kind)
        elif kind in _SCALAR_SIZES:
            self.pos += _SCALAR_SIZES[kind]
        else:
            raise ValueError(f"unknown metadata value type {kind}")
        if self.pos > len(self.data):
            raise _TruncatedError


def _tensor_bytes(dims: list[int], ggml_type: int) -> int | None:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None  # a type newer than this gguf package: skip the size check for it
    elements = 1
    for d in dims:
        elements *= d
    return elements // block * type_size


def check_gguf(path: Path) -> None:
    """Raise `ModelFileError` saying what is wrong with `path` and how to fix it."""
    hint = "download it again (localspec pull) or point to another GGUF file"
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"{path} is not a file: give the path of a .gguf file")
    size = path.stat().st_size
    if size < 24:
        raise ModelFileError(f"{path} is {size} bytes, too small to be a GGUF model: {hint}")
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != _MAGIC:
                raise ModelFileError(
                    f"{path} is not a GGUF file (starts with {bytes(m[:4])!r}, expected b'GGUF'): "
                    f"localspec runs llama.cpp GGUF models; {hint}"
                )
            _walk(path, _Cursor(m), size, hint)
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except _TruncatedError:
        raise ModelFileError(f"{path} is truncated (ends inside its header): {hint}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path} has a corrupt GGUF header ({exc}): {hint}") from exc


def _walk(path: Path, cur: _Cursor, size: int, hint: str) -> None:
    cur.take(4)
    version = cur.u32()
    if version not in _SUPPORTED_VERSIONS:
        raise ModelFileError(
            f"{path} is GGUF version {version}; this llama.cpp reads versions 2 and 3: {hint}"
        )
    n_tensors, n_kv = cur.u64(), cur.u64()
    alignment = _DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = cur.string()
        kind = cur.u32()
        if key == b"general.alignment" and kind == _UINT32:
            alignment = cur.u32()
        else:
            cur.skip_value(kind)
    data_end = 0
    for _ in range(n_tensors):
        cur.string()
        dims = [cur.u64() for _ in range(cur.u32())]
        ggml_type, offset = cur.u32(), cur.u64()
        nbytes = _tensor_bytes(dims, ggml_type)
        if nbytes is not None:
            data_end = max(data_end, offset + nbytes)
    data_start = -(-cur.pos // alignment) * alignment
    expected = data_start + data_end
    if size < expected:
        raise ModelFileError(
            f"{path} is truncated: {size} bytes, but its tensors need {expected} "
            f"({100 * size / expected:.0f}% present, a partial download?): {hint}"
        )
