"""ggml's device list and the offload measurement, on whatever build runs the suite."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from localspec.cli.arguments import FLASH_ATTN_CHOICES as ARGUMENT_CHOICES
from localspec.cli.arguments import VALUE_CACHE_CHOICES as ARGUMENT_VALUE_CHOICES
from localspec.errors import DecodeError
from localspec.llama.backend import build_info
from localspec.llama.context import LlamaContext
from localspec.llama.devices import (
    FLASH_ATTN_CHOICES,
    LONG_CONTEXT,
    devices,
    flash_attention,
    gpu_devices,
    measure_offload,
)
from localspec.llama.model import LlamaModel
from localspec.llama.params import VALUE_CACHE_TYPES


def test_devices_include_the_cpu_with_its_memory() -> None:
    found = devices()
    cpu = [d for d in found if d.kind == "cpu"]
    assert cpu
    assert all(0 < d.free_bytes <= d.total_bytes for d in cpu)
    if not build_info().gpu_offload:
        assert gpu_devices() == []  # only GPU backends bring GPU devices


def test_offload_measures_layers_and_memory(tiny_target: Path) -> None:
    measured = measure_offload([tiny_target], n_ctx=256, n_gpu_layers=-1)
    (model,) = measured.models
    assert model.layers >= 2  # at least one repeating layer, plus the output layer
    if gpu_devices():
        assert model.layers_on_gpu == model.layers
    else:  # a CPU build: nothing offloaded, no VRAM to speak of
        assert model.layers_on_gpu == 0
        assert model.vram_bytes == measured.context_vram_bytes == 0
        assert measured.free_before == measured.free_after == 0


@pytest.mark.parametrize(("choice", "asked"), [("on", True), ("off", False)])
def test_flash_attention_on_or_off_is_asked_as_given(
    model: LlamaModel, choice: str, asked: bool
) -> None:
    assert flash_attention(choice, model, -1, 512) is asked
    assert flash_attention(choice, model, -1, LONG_CONTEXT) is asked


def test_flash_attention_auto_is_off_on_the_cpu_at_long_contexts(model: LlamaModel) -> None:
    """The CPU's flash-attention kernel decodes slower at long contexts only; on a GPU
    llama.cpp decides."""
    assert flash_attention("auto", model, 0, LONG_CONTEXT) is False
    assert flash_attention("auto", model, 0, LONG_CONTEXT - 1) is None
    assert flash_attention("auto", model, -1, LONG_CONTEXT) is (None if gpu_devices() else False)


def test_flash_attention_refuses_another_choice(model: LlamaModel) -> None:
    with pytest.raises(ValueError, match="auto, on, off"):
        flash_attention("yes", model, -1, 512)


def test_the_command_line_offers_the_choices_the_policy_knows() -> None:
    assert FLASH_ATTN_CHOICES == ARGUMENT_CHOICES
    assert tuple(VALUE_CACHE_TYPES) == ARGUMENT_VALUE_CHOICES


@pytest.mark.parametrize("values", ["f16", "bf16"])
def test_the_context_keeps_the_values_in_the_type_asked(model: LlamaModel, values: str) -> None:
    """llama.cpp keeps the values in the type asked: a state saved from one type does not
    restore into the other's context (why the disk prompt store keys its folder by it)."""
    with LlamaContext(model, 256, n_batch=32, n_threads=1, value_cache=values) as context:
        assert context.value_cache == values
        context.decode(list(range(40, 50)), logits="none")
        state = context.save_state()
    other = "bf16" if values == "f16" else "f16"
    with (
        LlamaContext(model, 256, n_batch=32, n_threads=1, value_cache=other) as context,
        pytest.raises(DecodeError, match="could not restore"),
    ):
        context.restore_state(state)


@pytest.mark.parametrize(
    ("asked", "said"), [(None, "auto"), (True, "enabled"), (False, "disabled")]
)
def test_the_context_asks_llama_cpp_for_what_was_chosen(
    model: LlamaModel, caplog: pytest.LogCaptureFixture, asked: bool | None, said: str
) -> None:
    """llama.cpp's own log line says what the context was created with; with it off, no
    graph node is the fused flash-attention op."""
    with caplog.at_level(logging.DEBUG, logger="localspec.llama.cpp"):
        LlamaContext(model, 256, n_batch=32, n_threads=1, flash_attn=asked).close()
    log = caplog.text
    assert re.search(rf"flash_attn\s+= {said}\b", log), log[-2000:]
    if asked is False:
        assert "FLASH_ATTN_EXT" not in log
