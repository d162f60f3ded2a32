"""`localspec bench edits`: the shipped edit tasks answered as the chat asks for them, with
the edit grammar and without it, applied and checked (`localspec.bench.edits`).

Prints the tables on stdout (progress on stderr) and with --json every answer, so that a
figure can be traced to the answers behind it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from localspec.bench.edit_tasks import EditTask, load_tasks
from localspec.bench.edits import Variant, as_records, run_edits
from localspec.bench.edits_report import format_edit_report
from localspec.bench.modes import draft_need, parse_mode
from localspec.bench.progress import Progress
from localspec.cli.bench_files import check_writable, model_settings, write_file
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.runtime import Runtime

MAX_TOKENS = 512  # the chat's default


def variants(modes_text: str, with_grammar: Sequence[bool]) -> list[Variant]:
    """Every mode with the grammar, then without it, as `--grammar` asks (`with_grammar`:
    its choice in `bench_parser.GRAMMAR_CHOICES`)."""
    names = [name.strip() for name in modes_text.split(",") if name.strip()]
    if not names:
        raise UsageError("--modes names no mode")
    modes = [parse_mode(name) for name in dict.fromkeys(names)]
    return [Variant(mode, on) for on in with_grammar for mode in modes]


def chosen_tasks(args: argparse.Namespace) -> list[EditTask]:
    """The tasks asked for: `--task` ids and `--language`s, or with --quick one per language."""
    tasks = load_tasks(args.tasks)
    if args.task:
        unknown = sorted(set(args.task) - {task.id for task in tasks})
        if unknown:
            raise UsageError(f"no task named {', '.join(unknown)} (see the tasks file)")
        tasks = [task for task in tasks if task.id in args.task]
    if args.language:
        tasks = [task for task in tasks if task.language in args.language]
    if args.quick:
        tasks = list({task.language: task for task in reversed(tasks)}.values())[::-1]
    if not tasks:
        raise UsageError("no task is left: check --task and --language")
    return tasks


def edits_bench_command(args: argparse.Namespace, with_grammar: Sequence[bool]) -> int:
    check_writable(args.json)
    tasks = chosen_tasks(args)
    chosen = variants(args.modes or "auto", with_grammar)
    max_tokens = MAX_TOKENS if args.max_tokens is None else args.max_tokens
    if max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    missing = sorted({need for task in tasks if (need := task.needs())})
    if missing:
        raise UsageError(
            f"the checks of some tasks run {', '.join(missing)}, which is not installed: "
            f"install it, or leave those tasks out (--language)"
        )
    settings = runtime_settings(args, draft_need([v.mode for v in chosen]), ngram_cache=False)
    progress = Progress(sys.stderr)
    with Runtime(settings, notify=progress.note) as runtime:
        runs = run_edits(runtime, tasks, chosen, max_tokens, seed=args.seed, progress=progress.note)
    names = [variant.name for variant in chosen]
    print(format_edit_report(runs, names))
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "max_tokens": max_tokens,
            "seed": args.seed,
            "variants": names,
            "tasks": [task.id for task in tasks],
        }
        document = {"settings": run_settings, "runs": as_records(runs)}
        write_file(args.json, json.dumps(document, indent=1))
    return 0
