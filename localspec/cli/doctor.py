"""`localspec doctor` and `localspec tune`: what this machine can do, and its calibration."""

from __future__ import annotations

import argparse
import json
from typing import Any

from localspec.client import default_server
from localspec.llama.backend import build_info
from localspec.models import load_registry
from localspec.models.pull import installed_path
from localspec.paths import default_socket_path
from localspec.tuning import TunerStore


def _calibrations() -> dict[str, Any]:
    store = TunerStore()
    try:
        data = json.loads(store.calibration_file.read_text())
    except (OSError, ValueError):
        data = {}
    return {"file": str(store.calibration_file), "profiles": data}


def doctor_command(args: argparse.Namespace) -> int:
    info = build_info()
    registry = load_registry()
    installed = {
        name: str(path)
        for name, entry in registry.models.items()
        if (path := installed_path(entry)) is not None
    }
    calibration = _calibrations()
    socket_path = default_socket_path()
    server = default_server()
    report: dict[str, Any] = {
        "llama_cpp_python": info.llama_cpp_python,
        "gpu_offload": info.gpu_offload,
        "backend": info.system_info,
        "registry_files": [str(p) for p in registry.sources],
        "models_installed": installed,
        "default_pair": registry.default_pair,
        "calibration": calibration,
        "server_socket": str(socket_path),
        "server_running": server is not None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    offload = "yes" if info.gpu_offload else "no (CPU build)"
    print(f"llama-cpp-python {info.llama_cpp_python}; GPU offload: {offload}")
    print(f"backend: {info.system_info}")
    print(f"default pair: {registry.default_pair}")
    state = "a server is running" if server else "no server running (localspec serve)"
    print(f"server socket: {socket_path}: {state}")
    print("installed models:" if installed else "installed models: none (localspec pull)")
    for name, location in installed.items():
        print(f"  {name}: {location}")
    profiles = calibration["profiles"]
    print(f"calibrations: {len(profiles)} in {calibration['file']}")
    for key, profile in profiles.items():
        verify = ", ".join(f"{1000 * s:.0f}" for s in profile["verify_s"])
        draft = profile.get("draft_s")
        draft_text = f"{1000 * draft:.0f} ms" if draft else "none"
        batches = len(profile["verify_s"])
        print(f"  {key}: verify 1..{batches} tokens = {verify} ms; draft {draft_text}")
    return 0
