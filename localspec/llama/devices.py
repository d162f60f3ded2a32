"""ggml's compute devices, their free memory, and what a model pair takes on them.

llama-cpp-python 0.3.36 binds none of `ggml_backend_dev_*`; the functions are looked up in the
same library it loaded (libllama pulls in libggml, and `dlsym` searches its dependencies).
llama.cpp reports no per-model figure for GPU memory or offloaded layers through its C API
(only log lines), so `measure_offload` measures the device's free memory before and after each
load, and computes the offloaded layers with llama.cpp's own rule (`llama_model::load_tensors`).
"""

from __future__ import annotations

import ctypes
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as lc

from localspec.llama.backend import init_backend
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.llama.pieces import CPU_PIECE

# enum ggml_backend_dev_type, ggml-backend.h
_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_GPU_KINDS = ("gpu", "igpu")


@dataclass(frozen=True)
class Device:
    """One ggml device: "CUDA0", "Metal", "Vulkan0", "CPU", with its memory in bytes."""

    name: str
    description: str
    kind: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class ModelOffload:
    """How much of one model llama.cpp put on the GPU."""

    path: Path
    layers_on_gpu: int
    layers: int  # repeating layers plus the output layer, as llama.cpp counts them
    vram_bytes: int  # device memory the weights took (free before minus free after)


@dataclass(frozen=True)
class PairOffload:
    """The pair loaded as the commands load it, and what it took on the GPU devices."""

    models: list[ModelOffload]
    context_vram_bytes: int  # KV caches and compute buffers of the contexts
    free_before: int
    free_after: int


@cache
def _api() -> Any:
    lib: Any = lc._lib  # the library llama-cpp-python loaded (see the module docstring)
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_count.argtypes = []
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for text in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        text.restype = ctypes.c_char_p
        text.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    size_p = ctypes.POINTER(ctypes.c_size_t)
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
    return lib


def devices() -> list[Device]:
    """Every device this llama.cpp build can compute on, with its free and total memory."""
    init_backend()
    lib = _api()
    found = []
    for index in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        found.append(
            Device(
                name=lib.ggml_backend_dev_name(dev).decode("utf-8", "replace"),
                description=lib.ggml_backend_dev_description(dev).decode("utf-8", "replace"),
                kind=_KINDS.get(lib.ggml_backend_dev_type(dev), "unknown"),
                free_bytes=free.value,
                total_bytes=total.value,
            )
        )
    return found


def gpu_devices() -> list[Device]:
    return [d for d in devices() if d.kind in _GPU_KINDS]


def _gpu_free() -> int:
    return sum(d.free_bytes for d in gpu_devices())


def offloaded_layers(model: LlamaModel, n_gpu_layers: int) -> tuple[int, int]:
    """(layers on the GPU, layers): llama.cpp's rule, which counts the output layer as one
    more and offloads nothing where no GPU device exists."""
    layers = int(lc.llama_model_n_layer(model.handle)) + 1
    if not gpu_devices():
        return 0, layers
    wanted = layers if n_gpu_layers < 0 else n_gpu_layers
    return min(wanted, layers), layers


def measure_offload(paths: list[Path], n_ctx: int, n_gpu_layers: int) -> PairOffload:
    """Load `paths` with one `n_ctx` context each, noting what every step took on the GPUs.

    Free memory is what the devices say (cudaMemGetInfo on CUDA), so another process
    allocating meanwhile would show up here too; the figures are for a quiet machine.
    """
    settings = ModelSettings(n_gpu_layers=n_gpu_layers)
    free_before = _gpu_free()
    offloads = []
    with ExitStack() as stack:
        models = []
        for path in paths:
            before = _gpu_free()
            model = stack.enter_context(LlamaModel(path, settings))
            on_gpu, layers = offloaded_layers(model, n_gpu_layers)
            offloads.append(ModelOffload(path, on_gpu, layers, max(0, before - _gpu_free())))
            models.append(model)
        loaded = _gpu_free()
        for model in models:
            stack.enter_context(LlamaContext(model, n_ctx))
        free_after = _gpu_free()
    return PairOffload(offloads, max(0, loaded - free_after), free_before, free_after)


FLASH_ATTN_CHOICES = ("auto", "on", "off")
LONG_CONTEXT = 8192
"""The context size from which `--flash-attn auto` turns flash attention off on a CPU."""


def flash_attention(choice: str, model: LlamaModel, n_gpu_layers: int, n_ctx: int) -> bool | None:
    """What `--flash-attn` (`choice`) asks of llama.cpp for `model`'s contexts of `n_ctx`
    tokens; None leaves it to llama.cpp, which turns it on wherever the device supports it,
    the CPU included.

    "auto" turns it off where no layer runs on a GPU and the context is long. llama.cpp's CPU
    flash-attention kernel decodes slower at long contexts: with the 1.5B target on a 2-core
    Zen 4, at 4,600 tokens of context, processing a 600-token edit took 0.86x the time and a
    decoded token 0.89x with it off; on a 2-core Xeon (AVX-512) at 8,192 tokens, decoding
    took 0.86x with it off, but prompts 1.14x (docs/measured.md, "Long prompts against
    llama-server"): long prompts, an agent's, may pay for `--flash-attn on` there. Reports on
    Arm Neoverse and Ice Lake Xeons found it slower too (llama.cpp #27086, llamafile #975).
    At 700 tokens the two were equal, and with it off batches of 2 and 3 tokens no longer
    decode bit-identically to one token: n-gram drafts on the short edit prompts fell from
    1.09x to 1.02x of plain decoding (measured when the tie guard re-decoded near-ties; it
    now verifies one token at a time there). So short
    contexts keep it, and a context of `LONG_CONTEXT` tokens or more, which only long prompts
    (an editor's FIM context) need, goes without. The plain path also costs memory: a score
    matrix of a batch by the context per head, ~500 MB more at 16k. On a GPU flash attention
    saves memory and time, and llama.cpp decides.
    """
    if choice not in FLASH_ATTN_CHOICES:
        raise ValueError(f"flash attention is one of {', '.join(FLASH_ATTN_CHOICES)}: {choice!r}")
    if choice != "auto":
        return choice == "on"
    on_gpu, _ = offloaded_layers(model, n_gpu_layers)
    return None if on_gpu or n_ctx < LONG_CONTEXT else False


def shared_piece(asked: int | None, model: LlamaModel, n_gpu_layers: int) -> int | None:
    """Prompt tokens per llama_decode call for `model`'s contexts while editors' requests
    stop prompts (`localspec.llama.pieces`): `asked` (`--ubatch-size`), else `CPU_PIECE`
    where no layer runs on a GPU; None: the whole batch."""
    if asked is not None:
        return asked
    on_gpu, _ = offloaded_layers(model, n_gpu_layers)
    return None if on_gpu else CPU_PIECE
