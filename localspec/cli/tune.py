"""`localspec tune`: measure this machine for `--spec auto`, and save it as a profile.

A saved profile (`--save-profile FILE`) is the calibration plus what it was measured on: the
machine, the models, the llama.cpp build and the command. `localspec whatif --profile FILE`
replays a benchmark against it, and the measured profiles shipped in `localspec/profiles/`
are how the tuner's behaviour on other hardware is known.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from localspec.cli.notice import notice
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.llama.backend import build_info
from localspec.paths import write_private
from localspec.runtime import Runtime


def tune_command(args: argparse.Namespace) -> int:
    """Measure (or re-measure) this machine for the chosen models; print the profile."""
    if args.save_profile is not None and not args.save_profile.parent.is_dir():
        raise UsageError(
            f"cannot write {args.save_profile}: the folder {args.save_profile.parent} "
            "does not exist"
        )
    with Runtime(runtime_settings(args, None), notice) as runtime:
        profile = runtime.hardware_profile(recalibrate=args.recalibrate)
        settings = runtime.settings
        threads = runtime.models.target_context.n_threads
    k_max = len(profile.verify_s) - 1
    record = {
        **profile.to_dict(),
        "draft_can_pay": profile.draft_can_ever_pay(k_max),
        "verify_relative": [round(s / profile.verify_s[0], 2) for s in profile.verify_s],
    }
    print(json.dumps(record, indent=2))
    if args.save_profile is not None:
        models = {
            "target": settings.target.name,
            "draft": settings.draft.name if settings.draft else None,
            "threads": threads,
            "gpu_layers": [settings.target_gpu_layers, settings.draft_gpu_layers],
        }
        saved = {**describe_machine(), "models": models, **record}
        try:
            write_private(args.save_profile, json.dumps(saved, indent=2) + "\n", own_folder=False)
        except OSError as exc:
            raise UsageError(f"cannot write {args.save_profile}: {exc.strerror}") from exc
        notice(f"saved the profile to {args.save_profile} (localspec whatif --profile reads it)")
    return 0


def describe_machine() -> dict[str, Any]:
    """What a profile was measured on, in words a reader of `whatif` can place."""
    info = build_info()
    return {
        "machine": f"{_cpu_name()}, {os.cpu_count()} CPUs, {platform.system()} "
        f"{platform.machine()}",
        "gpu_offload": info.gpu_offload,
        "backend": info.system_info,
        "llama_cpp_python": info.llama_cpp_python,
        "measured": datetime.date.today().isoformat(),
        "command": shlex.join(["localspec", *sys.argv[1:]]),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
