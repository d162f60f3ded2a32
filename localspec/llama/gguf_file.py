"""Checks a GGUF file before llama.cpp sees it, so bad files give a clear error, not a crash.

llama.cpp aborts the process (`GGML_ASSERT`) on some values it does not expect, and reports
others in several log lines ending in a message that blames the architecture. Walking the
header (magic, version, metadata, tensor table) here applies the rules of llama.cpp's reader
(`ggml/src/gguf.cpp`: a power-of-two alignment, known tensor types, tensors laid out one after
the other at aligned offsets, no more than 4 dimensions) and compares the end of the last
tensor with the file size, in milliseconds and without reading the weights; `gguf_values`
then checks the hyperparameters llama.cpp asserts on. Every count and length field is checked
against the bytes left before it is used, so a hostile length (a string "gigabytes long", an
array of 2^60 elements, 2^40 tensors) is refused at once instead of being walked or allocated.
"""

from __future__ import annotations

import mmap
import stat
import struct
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.errors import ModelFileError
from localspec.llama.gguf_values import GGUFHeader, Tensor, Value, check_values

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NAME = 64  # GGML_MAX_NAME, the terminating NUL included
_KEEP_STRING = 1024  # longer metadata strings (templates, licences) are skipped, not decoded
_KEEP_ARRAY = 4096  # per-layer integer arrays are kept; longer ones only counted
_STRING, _ARRAY, _UINT32 = 8, 9, 4
# GGUF value type -> struct format of one value (strings = 8 and arrays = 9 are variable)
_FORMATS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a one-byte key, type, the smallest value
_MIN_TENSOR_BYTES = 8 + 1 + 4 + 4 + 8  # name length, one-byte name, n_dims, type, offset


class _TruncatedError(Exception):
    """The header ends before a field it announces."""


class _CorruptError(Exception):
    """A field holds a value llama.cpp's reader refuses; the message says which."""


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise _TruncatedError
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def skip(self, n: int) -> None:
        if n > self.left():
            raise _TruncatedError
        self.pos += n

    def scalar(self, kind: int) -> int | float | bool:
        fmt = "<" + _FORMATS[kind]
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def u32(self) -> int:
        return int(self.scalar(4))

    def u64(self) -> int:
        return int(self.scalar(10))

    def string(self, keep: int = _KEEP_STRING) -> str | None:
        """A string, decoded when at most `keep` bytes long (None for a longer one, skipped)."""
        length = self.u64()
        if length > keep:
            self.skip(length)
            return None
        return self.take(length).decode("utf-8", "replace")

    def counted(self, count: int, each: int) -> None:
        """Refuse a count whose items, at `each` bytes at least, cannot fit in the file."""
        if count * each > self.left():
            raise _TruncatedError

    def value(self, kind: int) -> Value:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.array()
        if kind not in _FORMATS:
            raise _CorruptError(f"has a metadata value of unknown type {kind}")
        return self.scalar(kind)

    def array(self) -> Value:
        """Integer arrays up to `_KEEP_ARRAY` items as lists; other arrays as their length."""
        kind, count = self.u32(), self.u64()
        if kind == _STRING:
            self.counted(count, 8)
            for _ in range(count):
                self.string(keep=0)
            return count
        if kind not in _FORMATS:
            raise _CorruptError(f"has a metadata array of type {kind} (nested or unknown)")
        size = struct.calcsize(_FORMATS[kind])
        self.counted(count, size)
        if count <= _KEEP_ARRAY and _FORMATS[kind] in "BbHhIiQq":
            return [int(self.scalar(kind)) for _ in range(count)]
        self.skip(size * count)
        return count


def check_gguf(path: Path) -> GGUFHeader:
    """Raise `ModelFileError` saying what is wrong with `path` and how to fix it; return its
    header (metadata and tensor table) when nothing is."""
    hint = "download it again (localspec pull) or point to another GGUF file"
    size = _regular_file_size(path)
    if size < 24:
        raise ModelFileError(f"{path} is {size} bytes, too small to be a GGUF model: {hint}")
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != _MAGIC:
                raise ModelFileError(
                    f"{path} is not a GGUF file (starts with {bytes(m[:4])!r}, expected b'GGUF'): "
                    f"localspec runs llama.cpp GGUF models; {hint}"
                )
            header = _read(path, _Cursor(m), hint)
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except _TruncatedError:
        raise ModelFileError(f"{path} is truncated (ends inside its header): {hint}") from None
    except _CorruptError as exc:
        raise ModelFileError(f"{path} {exc}: {hint}") from None
    if size < header.data_end:
        raise ModelFileError(
            f"{path} is truncated: {size} bytes, but its tensors need {header.data_end} "
            f"({100 * size / header.data_end:.0f}% present, a partial download?): {hint}"
        )
    problem = check_values(header)
    if problem is not None:
        raise ModelFileError(
            f"{path} {problem}, which llama.cpp cannot load: the file is damaged or was written "
            f"wrongly; {hint}"
        )
    return header


def _regular_file_size(path: Path) -> int:
    """The size of `path`, refusing anything but a regular file without opening it (a FIFO
    would block the open until a writer came)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ModelFileError(f"model file not found: {path}") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise ModelFileError(f"{path} is not a file: give the path of a .gguf file")
    return info.st_size


def _read(path: Path, cur: _Cursor, hint: str) -> GGUFHeader:
    cur.take(4)
    version = cur.u32()
    if version not in _SUPPORTED_VERSIONS:
        raise ModelFileError(
            f"{path} is GGUF version {version}; this llama.cpp reads versions 2 and 3: {hint}"
        )
    n_tensors, n_kv = cur.u64(), cur.u64()
    cur.counted(n_kv, _MIN_KV_BYTES)
    cur.counted(n_tensors, _MIN_TENSOR_BYTES)
    values = _read_values(cur, n_kv)
    alignment = values.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool):
        raise _CorruptError("has general.alignment of a type other than uint32")
    if alignment <= 0 or alignment & (alignment - 1):
        raise _CorruptError(f"has general.alignment {alignment}, not a power of two")
    tensors = [_read_tensor(cur) for _ in range(n_tensors)]
    data_start = -(-cur.pos // alignment) * alignment
    expected = 0  # gguf.cpp: each tensor starts where the previous one ends, padded
    for tensor in tensors:
        if tensor.offset != expected:
            raise _CorruptError(
                f"has tensor {tensor.name} at data offset {tensor.offset}, expected {expected} "
                f"(tensors follow one another, aligned to {alignment} bytes)"
            )
        expected += -(-tensor.nbytes // alignment) * alignment
    data_end = data_start + max((t.offset + t.nbytes for t in tensors), default=0)
    return GGUFHeader(values, tensors, data_end)


def _read_values(cur: _Cursor, n_kv: int) -> dict[str, Value]:
    values: dict[str, Value] = {}
    for _ in range(n_kv):
        key = cur.string()
        if not key:
            raise _CorruptError("has an empty or overlong metadata key")
        if key in values:
            raise _CorruptError(f"has the metadata key {key} twice")
        kind = cur.u32()
        if key == "general.alignment" and kind != _UINT32:
            raise _CorruptError("has general.alignment of a type other than uint32")
        values[key] = cur.value(kind)
    return values


def _read_tensor(cur: _Cursor) -> Tensor:
    name = cur.string(keep=_MAX_NAME)
    if name is None or len(name.encode()) >= _MAX_NAME:
        raise _CorruptError(f"has a tensor name longer than {_MAX_NAME - 1} bytes")
    n_dims = cur.u32()
    if n_dims > _MAX_DIMS:
        raise _CorruptError(f"has tensor {name} with {n_dims} dimensions (at most {_MAX_DIMS})")
    dims = [cur.u64() for _ in range(n_dims)]
    ggml_type, offset = cur.u32(), cur.u64()
    return Tensor(name, dims, offset, _tensor_bytes(name, dims, ggml_type))


def _tensor_bytes(name: str, dims: list[int], ggml_type: int) -> int:
    """The bytes a tensor takes, refusing what gguf.cpp refuses: an unknown type, a row that
    is not a whole number of blocks, more elements than an int64 holds."""
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise _CorruptError(f"has tensor {name} of unknown type {ggml_type}") from None
    elements = 1
    for d in dims:
        elements *= d
    if elements >= 2**63 or any(d >= 2**63 for d in dims):
        raise _CorruptError(f"has tensor {name} with shape {dims}, too many elements")
    if dims and dims[0] % block:
        raise _CorruptError(
            f"has tensor {name} with rows of {dims[0]} values, not a multiple of its type's "
            f"block of {block}"
        )
    return elements // block * type_size
