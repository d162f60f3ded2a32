"""The `localspec` command line: one small builder per subcommand, and its handler.

A handler imports its command's module only when that command runs (`localspec complete`
through a server must not pay for llama.cpp, the bench or the TUI), with a plain `import`
statement so that mypy checks the call.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from localspec import __version__
from localspec.cli.arguments import (
    add_context_options,
    add_generation_options,
    add_model_options,
    add_server_options,
    add_watch_options,
    at_least,
    whole,
)
from localspec.cli.bench_parser import add_bench
from localspec.cli.limit_args import add_constraint_limit_options
from localspec.cli.serve_parser import add_serve
from localspec.cli.subcommand import add_command

_MAX_DAYS = 36_500  # a hundred years: further back is before any history, and no date

if TYPE_CHECKING:
    from localspec.cli.subcommand import Commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localspec",
        description="Local coding-assistant runtime with exact speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show llama.cpp's log and tracebacks"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (
        _complete,
        add_serve,
        _chat,
        add_bench,
        _whatif,
        _pull,
        _models,
        _doctor,
        _stats,
        _tune,
        _build_cuda,
    ):
        add(commands)
    return parser


def _run_complete(args: argparse.Namespace) -> int:
    from localspec.cli.complete import run  # noqa: PLC0415

    return run(args)


def _complete(commands: Commands) -> None:
    complete = add_command(
        commands, "complete", _run_complete, "one-shot generation (stdin, then arguments)"
    )
    complete.add_argument("prompt", nargs="*", help="prompt text (appended to piped stdin)")
    complete.add_argument("-s", "--system", help="system prompt")
    complete.add_argument(
        "--raw", action="store_true", help="send the prompt without chat template"
    )
    complete.add_argument("--stats", action="store_true", help="statistics as JSON on stderr")
    complete.add_argument(
        "--json", action="store_true", help="one JSON object: text, finish reason, statistics"
    )
    complete.add_argument(
        "-x", "--extract", action="store_true", help="print only the first fenced code block"
    )
    complete.add_argument("--no-stream", action="store_true", help="print the answer at the end")
    complete.add_argument(
        "--apply",
        action="store_true",
        help="apply the answer's edits to the files they name (under the working folder); the "
        "diff goes to stderr; the model is asked for edits (after your --system): small --files "
        "whole, others as SEARCH/REPLACE blocks; --max-tokens defaults to 512 here",
    )
    complete.add_argument(
        "--dry-run", action="store_true", help="as --apply, but only print the diff"
    )
    complete.add_argument(
        "--edit-grammar",
        action="store_true",
        help="with --apply or --dry-run and --file: generate under a grammar of the files, so "
        "that every edit names one of them and applies (models in this process only)",
    )
    complete.add_argument(
        "--file",
        action="append",
        type=Path,
        metavar="PATH",
        help="put this file in the prompt, by its path in a fenced block (repeatable)",
    )
    complete.add_argument(
        "--fim", action="store_true", help="fill in the middle: the prompt is the text before"
    )
    complete.add_argument("--suffix", help="with --fim: the text after the gap")
    complete.add_argument("--suffix-file", type=Path, help="with --fim: read the suffix here")
    complete.add_argument(
        "--json-schema",
        metavar="FILE|JSON",
        help="the output must match this JSON schema (a file, or the schema itself)",
    )
    complete.add_argument(
        "--grammar", metavar="FILE", help="the output must match this GBNF grammar (llama.cpp's)"
    )
    add_model_options(complete)
    add_generation_options(complete)
    add_watch_options(complete, guard=False)
    add_constraint_limit_options(complete)
    add_server_options(complete, "refused if it runs other models or load options than given")


def _run_chat(args: argparse.Namespace) -> int:
    from localspec.cli.chat import run  # noqa: PLC0415

    return run(args)


def _chat(commands: Commands) -> None:
    chat = add_command(commands, "chat", _run_chat, "chat in the terminal (saved conversations)")
    chat.add_argument("-s", "--system", help="system prompt for new conversations")
    chat.add_argument("--conversation", type=whole, help="open this saved conversation (its id)")
    add_model_options(chat)
    add_generation_options(chat)
    add_watch_options(chat)
    add_server_options(
        chat,
        "refused if it runs other models or load options than given; --ctx-size: the window "
        "of a server that does not report one",
    )


def _run_whatif(args: argparse.Namespace) -> int:
    from localspec.cli.whatif import whatif_command  # noqa: PLC0415

    return whatif_command(args)


def _whatif(commands: Commands) -> None:
    whatif = add_command(
        commands,
        "whatif",
        _run_whatif,
        "replay a bench's answers under other policies and machines (no timing noise)",
    )
    whatif.add_argument("results", type=Path, help="a `localspec bench --json` file")
    whatif.add_argument(
        "--profile",
        type=Path,
        action="append",
        default=[],
        help="also predict for this machine profile (`localspec tune --save-profile FILE`)",
    )
    whatif.add_argument("--workloads", type=Path, help="the JSONL the bench ran (default: shipped)")
    whatif.add_argument("--no-machine", action="store_true", help="skip this machine's calibration")
    whatif.add_argument("--json", type=Path, help="write the predictions here")


def _run_pull(args: argparse.Namespace) -> int:
    from localspec.cli.models import pull_command  # noqa: PLC0415

    return pull_command(args)


def _pull(commands: Commands) -> None:
    pull = add_command(
        commands, "pull", _run_pull, "download models or pairs (default: the default pair)"
    )
    pull.add_argument("names", nargs="*", help="pair or model names from `localspec models`")
    pull.add_argument("--offline", action="store_true", help="only check what is cached")


def _run_models(args: argparse.Namespace) -> int:
    from localspec.cli.models import models_command  # noqa: PLC0415

    return models_command(args)


def _models(commands: Commands) -> None:
    models = add_command(commands, "models", _run_models, "known and installed models and pairs")
    models.add_argument("--json", action="store_true", help="machine-readable output")


def _run_doctor(args: argparse.Namespace) -> int:
    from localspec.cli.doctor import doctor_command  # noqa: PLC0415

    return doctor_command(args)


def _doctor(commands: Commands) -> None:
    doctor = add_command(
        commands, "doctor", _run_doctor, "llama.cpp build, GPU offload, models, calibrations"
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    # the default pair's KV caches are measured at these sizes
    add_context_options(doctor)


def _run_stats(args: argparse.Namespace) -> int:
    from localspec.cli.stats import stats_command  # noqa: PLC0415

    return stats_command(args)


def _stats(commands: Commands) -> None:
    stats = add_command(
        commands,
        "stats",
        _run_stats,
        "speculation over days: acceptance, speed-up, time per token, guard and drift events "
        "per route, model pair and mode (the history serve, chat and complete write)",
    )
    stats.add_argument(
        "--days",
        type=at_least(1, at_most=_MAX_DAYS),
        default=7,
        metavar="N",
        help=f"the last N days (default 7, at most {_MAX_DAYS})",
    )
    stats.add_argument("--json", action="store_true", help="machine-readable: rows and events")
    stats.add_argument(
        "--chart",
        type=Path,
        metavar="FILE.png",
        help="also draw the speed-up and p95 time per token per day and route (localspec[bench])",
    )
    stats.add_argument(
        "--history", type=Path, metavar="PATH", help="the history file (default: the data folder's)"
    )


def _run_tune(args: argparse.Namespace) -> int:
    from localspec.cli.tune import tune_command  # noqa: PLC0415

    return tune_command(args)


def _tune(commands: Commands) -> None:
    tune = add_command(
        commands, "tune", _run_tune, "measure this machine for --spec auto (cached otherwise)"
    )
    tune.add_argument("--recalibrate", action="store_true", help="measure again, replace the cache")
    tune.add_argument(
        "--save-profile",
        type=Path,
        metavar="FILE",
        help="also write the profile, with the machine, models and command, to FILE "
        "(for `localspec whatif --profile FILE`)",
    )
    add_model_options(tune)


def _run_build_cuda(args: argparse.Namespace) -> int:
    from localspec.cli.build_cuda import build_cuda_command  # noqa: PLC0415

    return build_cuda_command(args)


def _build_cuda(commands: Commands) -> None:
    build = add_command(
        commands,
        "build-cuda",
        _run_build_cuda,
        "rebuild llama.cpp with CUDA from PyPI alone (NVIDIA's CUDA 13 wheels; no toolkit, "
        "no GPU needed to build)",
    )
    build.add_argument(
        "--arch",
        action="append",
        metavar="SM",
        help="GPU architecture(s) to build for, e.g. 86 (RTX 30xx), 89 (RTX 40xx), 90 (H100), "
        "120 (RTX 50xx); comma-separated or repeated (default: this machine's GPU)",
    )
    build.add_argument(
        "--wheel-dir",
        type=Path,
        metavar="DIR",
        help="write a wheel here instead of installing (for another machine)",
    )
    build.add_argument("--version", help="llama-cpp-python version (default: the installed one)")
    build.add_argument("--jobs", type=at_least(1), help="compile jobs (default: the CPU count)")
    build.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
