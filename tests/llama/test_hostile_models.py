"""Hostile and damaged GGUF files: each is one line naming the file and the bad value.

llama.cpp aborts the whole process (`GGML_ASSERT`, SIGABRT and a long backtrace) on some of
these and reports others in several lines blaming the architecture, so the pre-check must
refuse them before llama.cpp sees them. Tests that would load such a file through llama.cpp
run `localspec` in a subprocess and assert its exit status and its single line of stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from localspec.errors import ModelFileError
from localspec.llama.gguf_file import check_gguf
from tests.test_cli import localspec
from tests.tiny_models import (
    ARRAY_COUNT,
    N_VOCAB,
    STRING_LENGTH,
    TENSOR_DIMS,
    TENSOR_OFFSET,
    TENSOR_TYPE,
    TinySpec,
    patched_copy,
    write_tiny_model,
)


class _Patch(NamedTuple):
    """What `patched_copy` changes, and words the one-line error must hold."""

    key: str
    value: int
    words: str
    part: int | None = None
    item: int = 0


_LAYERS = "llama.block_count"
_HEADS = "llama.attention.head_count"
_OUTPUT = "tensor:output.weight"
_PATCHES = {
    "no-layers": _Patch(_LAYERS, 0, "llama.block_count = 0 (llama.cpp loads 1 to 512 layers)"),
    "1000-layers": _Patch(_LAYERS, 1000, "llama.block_count = 1000"),
    "missing-layer": _Patch(_LAYERS, 3, "llama.block_count = 3 but no tensors for layer 2"),
    "extra-layer": _Patch(_LAYERS, 1, "llama.block_count = 1 but tensors for layer 1"),
    "no-embedding": _Patch("llama.embedding_length", 0, "llama.embedding_length = 0"),
    "no-heads": _Patch(_HEADS, 0, "llama.attention.head_count = 0"),
    "heads-not-dividing": _Patch(
        _HEADS, 3, "llama.embedding_length = 64, not a multiple of llama.attention.head_count = 3"
    ),
    "kv-heads": _Patch("llama.attention.head_count_kv", 3, "head_count_kv = 3 with"),
    "tensor-type-99": _Patch(_OUTPUT, 99, "output.weight of unknown type 99", TENSOR_TYPE),
    "misaligned-offset": _Patch(
        _OUTPUT, 7, "tensor output.weight at data offset 7, expected", TENSOR_OFFSET
    ),
    "vocabulary-mismatch": _Patch(
        _OUTPUT,
        N_VOCAB - 1,
        f"output.weight with {N_VOCAB - 1} rows for a vocabulary of {N_VOCAB} tokens",
        TENSOR_DIMS,
        item=1,
    ),
    "gigabyte-string": _Patch("general.name", 2**40, "is truncated", STRING_LENGTH),
    "2^60-array": _Patch("tokenizer.ggml.merges", 2**60, "is truncated", ARRAY_COUNT),
    "2^40-tensors": _Patch("GGUF.tensor_count", 2**40, "is truncated"),
    "2^40-keys": _Patch("GGUF.kv_count", 2**40, "is truncated"),
}


def _patched(tiny_target: Path, folder: Path, case: str) -> Path:
    patch = _PATCHES[case]
    dst = folder / f"{case}.gguf"
    return patched_copy(tiny_target, dst, patch.key, patch.value, part=patch.part, item=patch.item)


def _one_line(path: Path) -> str:
    with pytest.raises(ModelFileError) as refused:
        check_gguf(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return message


@pytest.mark.parametrize("case", sorted(_PATCHES))
def test_a_bad_value_is_one_line_naming_the_file_and_the_value(
    tiny_target: Path, tmp_path: Path, case: str
) -> None:
    assert _PATCHES[case].words in _one_line(_patched(tiny_target, tmp_path, case))


@pytest.mark.parametrize("alignment", [0, 7])
def test_an_alignment_that_is_not_a_power_of_two(tmp_path: Path, alignment: int) -> None:
    aligned = write_tiny_model(tmp_path / "aligned.gguf", TinySpec(alignment=64))
    check_gguf(aligned)
    bad = tmp_path / f"alignment-{alignment}.gguf"
    patched_copy(aligned, bad, "general.alignment", alignment)
    assert f"general.alignment {alignment}, not a power of two" in _one_line(bad)


@pytest.mark.parametrize("case", ["no-layers", "1000-layers", "no-heads", "tensor-type-99"])
def test_loading_a_file_llama_cpp_would_abort_on_is_one_line_and_status_1(
    tiny_target: Path, tmp_path: Path, case: str
) -> None:
    """Before the pre-check knew these, llama.cpp killed the process (SIGABRT) or printed
    several lines blaming the architecture."""
    bad = _patched(tiny_target, tmp_path, case)
    result = localspec("complete", "--target", bad, "--spec", "off", "--raw", "hi")
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"localspec: error: {bad} ")
    assert _PATCHES[case].words in line


def test_a_truncated_header_and_a_directory_are_one_line(tiny_target: Path, tmp_path: Path) -> None:
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(tiny_target.read_bytes()[:5000])
    assert "is truncated (ends inside its header)" in _one_line(header_only)
    with pytest.raises(ModelFileError, match="is not a file"):
        check_gguf(tmp_path)
