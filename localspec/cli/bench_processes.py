"""`localspec bench processes`: `localspec complete` per answer, as a user runs it.

Turns the bench options into `localspec.bench.processes` runs and prints the usual report
(generation speed from each process's statistics, with intervals) and a second table of wall
times, which include loading the models and whatever the draft model costs `auto`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from localspec.bench import step_profile
from localspec.bench.processes import ProcessOptions, run_processes, wall_rows
from localspec.bench.progress import Progress
from localspec.bench.report import document, format_report, summarise
from localspec.bench.workloads import load_workloads, select
from localspec.cli.bench_files import check_writable, write_file
from localspec.errors import UsageError
from localspec.speculative.settings import SpecMode

DEFAULT_MODES = "off,auto"
MAX_TOKENS = 160
REPEATS = 3
# the model and hardware options a `complete` process takes as they were given here
_VALUED = {
    "--model": "model",
    "--target": "target",
    "--draft": "draft",
    "--ctx-size": "ctx_size",
    "--draft-ctx-size": "draft_ctx_size",
    "--threads": "threads",
    "--gpu-layers": "gpu_layers",
    "--draft-gpu-layers": "draft_gpu_layers",
    "--flash-attn": "flash_attn",
    "--cache-type-v": "cache_type_v",
    "--ubatch-size": "ubatch_size",
}
_FLAGS = {"--offline": "offline", "--mmap": "mmap", "--mtp": "mtp"}


def model_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The model options given to the bench, as `complete` arguments."""
    found: list[str] = []
    for option, name in _VALUED.items():
        value = getattr(args, name, None)
        if value is not None:
            found += [option, str(value)]
    found += [option for option, name in _FLAGS.items() if getattr(args, name, None)]
    return tuple(found)


def _modes(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = {mode.value for mode in SpecMode}
    unknown = [name for name in names if name not in known]
    if unknown or "off" not in names:
        raise UsageError(
            f"`bench processes` runs `complete --spec MODE`: --modes must include off and name "
            f"only {', '.join(sorted(known))} (not {', '.join(unknown) or 'without off'})"
        )
    return list(dict.fromkeys(names))


def processes_bench_command(args: argparse.Namespace) -> int:
    check_writable(args.json)
    shipped = load_workloads(args.workloads, "complete.jsonl")
    workloads = select(shipped, args.category, one_per_category=args.quick)
    if any(w.is_fim or w.constraint is not None for w in workloads):
        raise UsageError(
            "`bench processes` asks `complete` plain questions: leave fim and constrained "
            "workloads out (--category)"
        )
    modes = _modes(args.modes or DEFAULT_MODES)
    repeats = (1 if args.quick else REPEATS) if args.repeats is None else args.repeats
    max_tokens = MAX_TOKENS if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    options = ProcessOptions(repeats, max_tokens, args.seed, model_args(args))
    samples, skipped = run_processes(workloads, modes, options, Progress(sys.stderr))
    if not samples:
        raise UsageError("no run finished: " + "; ".join(s.reason for s in skipped))
    report = summarise(samples, modes)
    print(format_report(report, modes, skipped, "not measured (a process per run)"))
    print()
    print("\n".join(wall_rows(samples, modes)))
    profile = step_profile.aggregate(samples, modes) if args.profile else None
    if profile is not None:
        print()
        print(step_profile.format_profile(profile))
    if args.json:
        settings: dict[str, Any] = {
            "processes": True,
            "repeats": repeats,
            "seed": args.seed,
            "max_tokens": max_tokens,
            "modes": modes,
            "model_args": list(options.model_args),
            "workloads": [w.id for w in workloads],
        }
        doc = document(report, samples, skipped, settings)
        if profile is not None:
            doc["step_profile"] = profile
        write_file(args.json, json.dumps(doc, indent=1))
    return 0
