"""`localspec doctor` and `localspec tune`: what this machine can do, and its calibration.

Besides the build and the GPU, doctor says whether the default target's KV cache can shift
(`serve --cache-reuse`), loading it memory-mapped into a small CPU context to ask llama.cpp.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from localspec.auto_io import TunerStore
from localspec.cli.arguments import ALL_LAYERS, DEFAULT_CTX_SIZE
from localspec.cli.build_cuda import toolchains
from localspec.client import default_server
from localspec.errors import LocalspecError, ModelLoadError
from localspec.gpu import advice, detect_gpu
from localspec.llama.backend import BuildInfo, build_info
from localspec.llama.context import LlamaContext
from localspec.llama.devices import LONG_CONTEXT, gpu_devices, measure_offload
from localspec.llama.kv_size import kv_size
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.llama.mtp_layers import mtp_summary
from localspec.loading import check_draft_ctx
from localspec.models import Registry, load_registry
from localspec.models.pull import installed_path
from localspec.observe.history import History, HistoryEvent, default_history_path
from localspec.observe.history_file import HistoryError
from localspec.paths import default_socket_path, read_private_json


def _calibrations() -> dict[str, Any]:
    store = TunerStore()
    try:
        data = read_private_json(store.calibration_file)
    except (OSError, ValueError):
        data = {}
    return {"file": str(store.calibration_file), "profiles": data}


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"


def _gpu_fields(info: BuildInfo) -> dict[str, Any]:
    """The GPU this machine has and, under a CPU-only build, the one-line rebuild advice."""
    gpu = detect_gpu()
    return {
        "gpu": asdict(gpu) if gpu else None,
        "gpu_advice": advice(gpu, info.llama_cpp_python) if gpu and not info.gpu_offload else None,
        # where a CUDA build can come from: `build-cuda`'s PyPI wheels, or a system toolkit
        "cuda_compilers": [{"source": t.source, "nvcc": str(t.nvcc)} for t in toolchains()],
    }


def _offload(registry: Registry, installed: dict[str, str]) -> dict[str, Any]:
    """For a GPU build: the default pair loaded as `complete` loads it (all layers, the default
    context), what it takes on the GPUs, and a warning where it does not fit."""
    pair = registry.pairs[registry.default_pair]
    files = [Path(installed[name]) for name in (pair.target, pair.draft) if name in installed]
    gpus = gpu_devices()
    report: dict[str, Any] = {
        "devices": [asdict(d) for d in gpus],
        "n_ctx": DEFAULT_CTX_SIZE,
        "models": [],
        "warning": None,
    }
    free = sum(d.free_bytes for d in gpus)
    weights = sum(f.stat().st_size for f in files)
    if not gpus:
        report["warning"] = "this GPU build finds no GPU device: the models run on the CPU"
    elif not files:
        report["warning"] = "the default pair is not installed (localspec pull): nothing measured"
    elif weights > free:
        report["warning"] = (
            f"the default pair's weights ({_gib(weights)}) do not fit in the free VRAM "
            f"({_gib(free)}): lower --gpu-layers and --draft-gpu-layers, or free the GPU"
        )
    else:
        try:
            measured = measure_offload(files, DEFAULT_CTX_SIZE, ALL_LAYERS)
        except ModelLoadError as exc:
            report["warning"] = f"the default pair does not fit in VRAM: {exc}"
        else:
            report["models"] = [{**asdict(m), "path": str(m.path)} for m in measured.models]
            report["context_vram_bytes"] = measured.context_vram_bytes
            report["free_vram_after_bytes"] = measured.free_after
    return report


def cache_shift(path: Path) -> bool:
    """Whether llama.cpp can shift this model's KV cache, which `serve --cache-reuse` needs
    (recurrent and most sliding-window models cannot): asked of a small CPU context over
    the memory-mapped file, well under a second for the 1.5B target."""
    with (
        LlamaModel(path, ModelSettings(n_gpu_layers=0, use_mmap=True)) as model,
        LlamaContext(model, 256, n_batch=32, n_threads=1) as context,
    ):
        return context.can_shift


def _cache_reuse(registry: Registry, installed: dict[str, str]) -> dict[str, Any] | None:
    """The default pair's target, and whether `--cache-reuse` shifts chunks for it or falls
    back to reusing the common prefix only (None: the target is not installed)."""
    target = registry.pairs[registry.default_pair].target
    if target not in installed:
        return None
    try:
        shifts = cache_shift(Path(installed[target]))
    except ModelLoadError as exc:
        return {"model": target, "can_shift": None, "error": str(exc)}
    return {"model": target, "can_shift": shifts}


def _print_cache_reuse(report: dict[str, Any] | None) -> None:
    if report is None:
        return
    if report["can_shift"] is None:
        print(f"KV chunk reuse (--cache-reuse): unknown, {report['model']} did not load")
    elif report["can_shift"]:
        print(f"KV chunk reuse (--cache-reuse): yes, {report['model']}'s cache can shift")
    else:
        print(
            f"KV chunk reuse (--cache-reuse): no, {report['model']}'s cache cannot shift "
            f"(recurrent or sliding-window): only the common prefix is reused"
        )


def _kv_cache(path: Path, n_ctx: int) -> dict[str, Any]:
    """llama.cpp's context for `n_ctx` tokens over the memory-mapped model, on the CPU, and
    the KV memory it takes (`localspec.llama.kv_size`)."""
    with (
        LlamaModel(path, ModelSettings(n_gpu_layers=0, use_mmap=True)) as model,
        LlamaContext(model, n_ctx, n_batch=32, n_threads=1) as context,
    ):
        size = kv_size(context)
    return {"n_ctx": size.n_ctx, "kv_bytes_per_token": size.bytes_per_token, "kv_bytes": size.bytes}


def _contexts(
    registry: Registry, installed: dict[str, str], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The default pair's contexts at --ctx-size and --draft-ctx-size, as llama.cpp makes
    them, and the KV memory each takes; a model not installed is named, not measured."""
    n_ctx = args.ctx_size or DEFAULT_CTX_SIZE  # --draft-ctx-size was checked on the way in
    pair = registry.pairs[registry.default_pair]
    report = []
    for role, name, asked in (
        ("target", pair.target, n_ctx),
        ("draft", pair.draft, args.draft_ctx_size or n_ctx),
    ):
        entry: dict[str, Any] = {"role": role, "model": name, "asked": asked}
        if name in installed:
            try:
                entry |= _kv_cache(Path(installed[name]), asked)
            except LocalspecError as exc:  # a model that will not load or decode: said, not fatal
                entry["error"] = str(exc)
        report.append(entry)
    return report


def _print_contexts(report: list[dict[str, Any]]) -> None:
    print("KV caches of the default pair (--ctx-size, --draft-ctx-size):")
    for entry in report:
        where = f"  {entry['role']} {entry['model']}"
        if "error" in entry:
            print(f"{where}: {entry['error']}")
        elif "kv_bytes" not in entry:
            print(f"{where}: {entry['asked']} tokens; not installed, not measured (localspec pull)")
        else:
            # llama.cpp rounds a context up to a multiple of 256 tokens
            asked = "" if entry["n_ctx"] == entry["asked"] else f" (asked {entry['asked']})"
            print(
                f"{where}: {entry['n_ctx']} tokens{asked}, {entry['kv_bytes'] / 2**20:.2f} MiB "
                f"({entry['kv_bytes_per_token']:,} bytes a token)"
            )


def _flash_attn_auto(gpu_offload: bool) -> str:
    """What `--flash-attn auto` does on this machine (`devices.flash_attention`)."""
    if gpu_offload and gpu_devices():
        return "llama.cpp's choice (on where the GPU supports it) for layers on the GPU"
    return (
        f"off at --ctx-size {LONG_CONTEXT} and more, where the CPU's kernel decodes slower "
        f"(long prompts may process faster with --flash-attn on: `localspec bench prompt` "
        f"measures both); llama.cpp's choice (on) below"
    )


def _print_gpu(report: dict[str, Any]) -> None:
    if report["gpu_advice"]:
        print(report["gpu_advice"])
    compilers = report["cuda_compilers"]
    nvidia = (report["gpu"] or {}).get("kind") == "cuda"
    if compilers or nvidia:
        found = ", ".join(f"{c['source']} ({c['nvcc']})" for c in compilers)
        print(f"CUDA compilers: {found or 'none (localspec build-cuda brings its own)'}")
    offload = report["gpu_offload_report"]
    if offload is None:
        return
    for d in offload["devices"]:
        free, total = _gib(d["free_bytes"]), _gib(d["total_bytes"])
        print(f"GPU device {d['name']} ({d['description']}): {free} free of {total}")
    for m in offload["models"]:
        layers = f"{m['layers_on_gpu']}/{m['layers']} layers on the GPU"
        print(f"  {Path(m['path']).name}: {layers}, {_gib(m['vram_bytes'])} of VRAM")
    if offload["models"]:
        print(
            f"  KV caches and compute buffers at --ctx-size {offload['n_ctx']}: "
            f"{_gib(offload['context_vram_bytes'])}; "
            f"{_gib(offload['free_vram_after_bytes'])} VRAM left"
        )
    if offload["warning"]:
        print(f"warning: {offload['warning']}")


_HISTORY_DAYS = 7
_HISTORY_EVENTS_SHOWN = 10


def _history() -> dict[str, Any]:
    """The history `localspec stats` reads: how many generations it holds, and the guard's and
    drift watch's events of the last week."""
    path = default_history_path()
    report: dict[str, Any] = {
        "file": str(path),
        "exists": path.exists(),
        "generations": 0,
        "events": [],
        "error": None,
    }
    try:
        history = History.existing(path)
        if history is not None:
            with history:
                report["generations"] = history.generations()
                report["events"] = [asdict(e) for e in history.events(_HISTORY_DAYS)]
    except HistoryError as exc:
        report["error"] = str(exc)
    return report


def _print_history(report: dict[str, Any]) -> None:
    if report["error"]:
        print(f"history: {report['error']}")
        return
    if not report["exists"]:
        print(f"history: none yet in {report['file']}: serve, chat and complete write it")
        return
    events = [HistoryEvent(**event) for event in report["events"]]
    print(f"history: {report['generations']} generations in {report['file']} (localspec stats)")
    print(f"guard and drift events in the last {_HISTORY_DAYS} days: {len(events) or 'none'}")
    for event in events[-_HISTORY_EVENTS_SHOWN:]:
        print(f"  {event.line}")
    if len(events) > _HISTORY_EVENTS_SHOWN:
        print(f"  and {len(events) - _HISTORY_EVENTS_SHOWN} earlier ones (localspec stats)")


def doctor_command(args: argparse.Namespace) -> int:
    # a bad --draft-ctx-size is said before minutes of loading models, not after
    check_draft_ctx(args.draft_ctx_size, args.ctx_size or DEFAULT_CTX_SIZE)
    info = build_info()
    registry = load_registry()
    installed = {
        name: str(path)
        for name, entry in registry.models.items()
        if (path := installed_path(entry)) is not None
    }
    # the installed models that can speculate without a draft model, and how
    mtp = {name: says for name, where in installed.items() if (says := mtp_summary(Path(where)))}
    calibration = _calibrations()
    socket_path = default_socket_path()
    server = default_server()
    report: dict[str, Any] = {
        "llama_cpp_python": info.llama_cpp_python,
        "gpu_offload": info.gpu_offload,
        "backend": info.system_info,
        "registry_files": [str(p) for p in registry.sources],
        "models_installed": installed,
        "models_mtp": mtp,
        "default_pair": registry.default_pair,
        "calibration": calibration,
        "server_socket": str(socket_path),
        "server_running": server is not None,
        **_gpu_fields(info),
        # a CPU build offloads nothing: no model is loaded to find that out
        "gpu_offload_report": _offload(registry, installed) if info.gpu_offload else None,
        "cache_reuse": _cache_reuse(registry, installed),
        "contexts": _contexts(registry, installed, args),
        "flash_attn_auto": _flash_attn_auto(info.gpu_offload),
        "history": _history(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    offload = "yes" if info.gpu_offload else "no (CPU build)"
    print(f"llama-cpp-python {info.llama_cpp_python}; GPU offload: {offload}")
    print(f"backend: {info.system_info}")
    _print_gpu(report)
    print(f"default pair: {registry.default_pair}")
    _print_cache_reuse(report["cache_reuse"])
    _print_contexts(report["contexts"])
    print(f"flash attention (--flash-attn auto): {report['flash_attn_auto']}")
    state = "a server is running" if server else "no server running (localspec serve)"
    print(f"server socket: {socket_path}: {state}")
    print("installed models:" if installed else "installed models: none (localspec pull)")
    for name, location in installed.items():
        print(f"  {name}: {location}" + (f" ({mtp[name]})" if name in mtp else ""))
    profiles = calibration["profiles"]
    print(f"calibrations: {len(profiles)} in {calibration['file']}")
    for key, profile in profiles.items():
        verify = ", ".join(f"{1000 * s:.0f}" for s in profile["verify_s"])
        draft = profile.get("draft_s")
        draft_text = f"{1000 * draft:.0f} ms" if draft else "none"
        batches = len(profile["verify_s"])
        print(f"  {key}: verify 1..{batches} tokens = {verify} ms; draft {draft_text}")
    _print_history(report["history"])
    return 0
