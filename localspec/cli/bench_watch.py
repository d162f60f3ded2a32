"""`localspec bench watch-cost`: what `/metrics` and the history cost, side by side with the
same generations unwatched (`localspec.bench.watch_cost`). The table goes to stdout, progress
to stderr, `--json` to a file."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from localspec.bench.modes import draft_need, parse_mode
from localspec.bench.progress import Progress
from localspec.bench.watch_cost import format_watch_cost, run_watch_cost
from localspec.bench.workloads import load_workloads, select
from localspec.cli.bench_files import check_writable, model_settings, write_file
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.runtime import Runtime

WATCH_REPEATS = 4  # ABBA twice
WATCH_TOKENS = 128


def watch_cost_command(args: argparse.Namespace) -> int:
    check_writable(args.json)
    names = [name.strip() for name in (args.modes or "auto").split(",") if name.strip()]
    if len(names) != 1:
        raise UsageError("`bench watch-cost` runs one mode (--modes auto, say)")
    mode = parse_mode(names[0])
    if mode.spec is None:
        raise UsageError(f"`bench watch-cost` runs localspec's own modes, not {mode.name}")
    questions = select(
        load_workloads(args.workloads, "chat.jsonl"), args.category, one_per_category=args.quick
    )
    repeats = WATCH_REPEATS if args.repeats is None else args.repeats
    max_tokens = WATCH_TOKENS if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    settings = replace(runtime_settings(args, draft_need([mode]), ngram_cache=False), guard=None)
    progress = Progress(sys.stderr)
    with tempfile.TemporaryDirectory() as folder, Runtime(settings, progress.note) as runtime:
        result = run_watch_cost(
            runtime,
            [w.prompt for w in questions],
            mode.spec,
            repeats=repeats,
            max_tokens=max_tokens,
            history_file=Path(folder) / "history.sqlite3",
            progress=progress.note,
        )
    print(format_watch_cost(result))
    if args.json:
        document = {
            "settings": {
                **model_settings(settings),
                "mode": mode.name,
                "repeats": repeats,
                "max_tokens": max_tokens,
                "questions": [w.id for w in questions],
            },
            "speeds": result.speeds,
            "ratios": result.ratios,
            "watcher_s": result.watcher_s,
        }
        write_file(args.json, json.dumps(document, indent=1))
    return 0
