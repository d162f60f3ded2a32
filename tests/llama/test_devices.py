"""ggml's device list and the offload measurement, on whatever build runs the suite."""

from __future__ import annotations

from pathlib import Path

from localspec.llama.backend import build_info
from localspec.llama.devices import devices, gpu_devices, measure_offload


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
