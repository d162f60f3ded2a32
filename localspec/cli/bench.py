"""`localspec bench engine` and `bench chat`: plain and speculative decoding, and the
ecosystem's baselines, side by side.

This module only turns arguments into a run of `localspec.bench` and prints its report: the
table on stdout (nothing else goes there), progress on stderr, optional JSON and PNG files.
The n-gram session cache is off here: it would learn the answers across repeats.
`bench chat` runs the chat app instead (`tui.bench`, imported only then), against
`complete`'s path on the shipped chat questions (`workloads/chat.jsonl`). The other
benchmarks have modules of their own (`bench_editor`, `bench_concurrency`, `bench_agent`,
`bench_processes`, `bench_watch`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from localspec.bench import chart, memory, step_profile
from localspec.bench.modes import DEFAULT_MODES, QUICK_MODES, draft_need, parse_mode, parse_modes
from localspec.bench.progress import Progress
from localspec.bench.report import document, format_report, summarise
from localspec.bench.runner import BenchOptions, run_bench
from localspec.bench.workloads import load_workloads, select
from localspec.cli.bench_files import check_writable, model_settings, on_path, write_file
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.runtime import Runtime

QUICK_MAX_TOKENS = 48
FULL_MAX_TOKENS = 128
ENGINE_REPEATS = 3
"""The report's intervals resample each prompt's pairs of runs with `off`: one pair shows no
noise at all, two little more than whether they agree."""
CHAT_REPEATS = 2


def _budget(args: argparse.Namespace, default_repeats: int) -> tuple[int, int]:
    """Repeats and max tokens per run; `is None`, not `or`: a 0 given is refused, not replaced."""
    default_tokens = QUICK_MAX_TOKENS if args.quick else FULL_MAX_TOKENS
    repeats = (1 if args.quick else default_repeats) if args.repeats is None else args.repeats
    max_tokens = default_tokens if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    return repeats, max_tokens


def engine_bench_command(args: argparse.Namespace) -> int:
    """`bench engine`: the modes side by side on the workloads, in one process."""
    check_writable(args.json, args.chart)
    if args.chart:
        chart.ensure_available()  # before minutes of benchmarking, not after
    workloads = select(load_workloads(args.workloads), args.category, one_per_category=args.quick)
    modes = parse_modes(args.modes or (QUICK_MODES if args.quick else DEFAULT_MODES))
    if args.llama_server is not None and not any(mode.server_spec for mode in modes):
        raise UsageError(
            "--llama-server is used only by the server-* modes: add one to --modes (e.g. "
            "server-off) or leave --llama-server out"
        )
    repeats, max_tokens = _budget(args, ENGINE_REPEATS)
    server = args.llama_server or on_path("llama-server")
    options = BenchOptions(repeats, max_tokens, server, args.seed)
    settings = runtime_settings(args, draft_need(modes), ngram_cache=False)
    progress = Progress(sys.stderr)
    with Runtime(settings, notify=progress.note) as runtime:
        threads = runtime.models.target_context.n_threads
        result = run_bench(runtime, workloads, modes, options, progress)
    report = summarise(result.samples, result.modes)
    print(format_report(report, result.modes, result.skipped, result.rss_method))
    profile = step_profile.aggregate(result.samples, result.modes) if args.profile else None
    if profile is not None:
        print()
        print(step_profile.format_profile(profile))
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "threads": threads,
            "repeats": options.repeats,
            "seed": options.seed,
            "max_tokens": options.max_tokens,
            "modes": [m.name for m in modes],
            "llama_server": str(options.llama_server) if options.llama_server else None,
            "workloads": [w.id for w in workloads],
            "peak_rss_method": result.rss_method,
            "process_peak_rss_mib": memory.lifetime_peak_bytes() / (1024 * 1024),
        }
        doc = document(report, result.samples, result.skipped, run_settings)
        if profile is not None:
            doc["step_profile"] = profile
        write_file(args.json, json.dumps(doc, indent=1))
    if args.chart:
        chart.write_chart(report, result.modes, args.chart)
    return 0


def chat_bench_command(args: argparse.Namespace) -> int:
    """`bench chat`: the chat app's tok/s against `complete`'s, prompt by prompt."""
    from tui import bench  # noqa: PLC0415  (the TUI's import cost is this surface's alone)

    check_writable(args.json)
    shipped = load_workloads(args.workloads, "chat.jsonl")
    workloads = select(shipped, args.category, one_per_category=args.quick)
    if any(w.is_fim for w in workloads):
        raise UsageError("the chat surface asks questions: leave fim workloads out (--category)")
    names = (args.modes or "auto").split(",")
    modes = bench.chat_modes([parse_mode(name.strip()) for name in names if name.strip()])
    repeats, max_tokens = _budget(args, CHAT_REPEATS)
    settings = runtime_settings(args, draft_need(modes), ngram_cache=False)
    progress = Progress(sys.stderr)
    plain = 0 if any(m.name == "off" for m in modes) else len(workloads)
    progress.start(len(workloads) * len(modes) * repeats * 2 + plain)
    with Runtime(settings, notify=progress.note) as runtime:
        result = bench.run_chat_bench(
            runtime,
            workloads,
            modes,
            bench.ChatBenchOptions(repeats, max_tokens),
            lambda workload, mode, surface, speed: progress.run_done(
                workload, f"{mode} {surface}", speed
            ),
        )
    progress.finish()
    report = bench.summarise(result)
    print(bench.format_chat_report(result, report))
    if args.json:
        run_settings: dict[str, Any] = {
            "surface": "chat",
            **model_settings(settings),
            "repeats": repeats,
            "max_tokens": max_tokens,
            "modes": [m.name for m in modes],
            "workloads": [w.id for w in workloads],
        }
        write_file(
            args.json, json.dumps(bench.chat_document(result, report, run_settings), indent=1)
        )
    return 0
