"""`localspec bench`: plain and speculative decoding, and the ecosystem's baselines, side by side.

This module only turns arguments into a run of `localspec.bench` and prints its report: the
table on stdout (nothing else goes there), progress on stderr, optional JSON and PNG files.
The n-gram session cache is off here: it would learn the answers across repeats.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from localspec.bench import chart, memory
from localspec.bench.modes import DEFAULT_MODES, QUICK_MODES, draft_need, parse_modes
from localspec.bench.progress import Progress
from localspec.bench.report import document, format_report, summarise
from localspec.bench.runner import BenchOptions, run_bench
from localspec.bench.workloads import load_workloads, select
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.runtime import Runtime

QUICK_MAX_TOKENS = 48
FULL_MAX_TOKENS = 128


def _check_writable(*paths: Path | None) -> None:
    """Refuse an output file whose folder is missing before minutes of benchmarking."""
    for path in paths:
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: the folder {path.parent} does not exist")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc


def _on_path(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


def bench_command(args: argparse.Namespace) -> int:
    _check_writable(args.json, args.chart)
    if args.chart:
        chart.ensure_available()  # before minutes of benchmarking, not after
    workloads = select(load_workloads(args.workloads), args.category, one_per_category=args.quick)
    modes = parse_modes(args.modes or (QUICK_MODES if args.quick else DEFAULT_MODES))
    if args.llama_server is not None and not any(mode.server_spec for mode in modes):
        raise UsageError(
            "--llama-server is used only by the server-* modes: add one to --modes (e.g. "
            "server-off) or leave --llama-server out"
        )
    default_tokens = QUICK_MAX_TOKENS if args.quick else FULL_MAX_TOKENS
    options = BenchOptions(  # `is None`, not `or`: a 0 given is refused below, not replaced
        repeats=(1 if args.quick else 2) if args.repeats is None else args.repeats,
        max_tokens=default_tokens if args.max_tokens is None else args.max_tokens,
        llama_server=args.llama_server or _on_path("llama-server"),
    )
    if options.repeats < 1 or options.max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    settings = runtime_settings(args, draft_need(modes), ngram_cache=False)
    progress = Progress(sys.stderr)
    with Runtime(settings, notify=progress.note) as runtime:
        threads = runtime.target_context.n_threads
        result = run_bench(runtime, workloads, modes, options, progress)
    report = summarise(result.samples, result.modes)
    print(format_report(report, result.modes, result.skipped, result.rss_method))
    if args.json:
        run_settings: dict[str, Any] = {
            "target": str(settings.target),
            "draft": str(settings.draft) if settings.draft else None,
            "n_ctx": settings.n_ctx,
            "threads": threads,
            "repeats": options.repeats,
            "max_tokens": options.max_tokens,
            "modes": [m.name for m in modes],
            "llama_server": str(options.llama_server) if options.llama_server else None,
            "workloads": [w.id for w in workloads],
            "peak_rss_method": result.rss_method,
            "process_peak_rss_mib": memory.lifetime_peak_bytes() / (1024 * 1024),
        }
        doc = document(report, result.samples, result.skipped, run_settings)
        _write(args.json, json.dumps(doc, indent=1))
    if args.chart:
        chart.write_chart(report, result.modes, args.chart)
    return 0
