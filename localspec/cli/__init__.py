"""The `localspec` command: parses arguments, calls the layers below, turns errors into exit codes.

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted. User errors print
one line on stderr; `--verbose` adds llama.cpp's log and tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from localspec import __version__
from localspec.cli.arguments import add_generation_options, add_model_options
from localspec.errors import LocalspecError


def _lazy(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports its command's module only when that command runs.

    `localspec complete` should not pay for importing the bench or the registry commands.
    """

    def handler(args: argparse.Namespace) -> int:
        command = getattr(importlib.import_module(f"localspec.cli.{module}"), function)
        return int(command(args))

    return handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localspec",
        description="Local coding-assistant runtime with exact speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help_: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(handler=handler)
        return sub

    complete = command(
        "complete", _lazy("complete", "run"), "one-shot generation (stdin, then arguments)"
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
        "--fim", action="store_true", help="fill in the middle: the prompt is the text before"
    )
    complete.add_argument("--suffix", help="with --fim: the text after the gap")
    complete.add_argument("--suffix-file", type=Path, help="with --fim: read the suffix here")
    where = complete.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        help="use this server (socket path or http://host:port); default: the "
        "local one if it is running",
    )
    where.add_argument(
        "--no-server", action="store_true", help="load the models here even if a server runs"
    )
    add_model_options(complete)
    add_generation_options(complete)

    serve = command(
        "serve",
        _lazy("serve", "serve_command"),
        "serve editors and OpenAI clients on a Unix socket (and TCP with --port)",
    )
    serve.add_argument("--socket", type=Path, help="Unix socket path (default: runtime dir)")
    serve.add_argument("--no-socket", action="store_true", help="no Unix socket (TCP only)")
    serve.add_argument("--port", type=int, help="also listen on TCP 127.0.0.1:PORT (0: any)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="TCP address (other than loopback: with a warning)"
    )
    serve.add_argument("--no-auth", action="store_true", help="TCP without the bearer token")
    serve.add_argument(
        "--show-token", action="store_true", help="print the TCP bearer token and exit"
    )
    serve.add_argument("--queue", type=int, default=4, help="requests that may wait (beyond: 503)")
    add_model_options(serve)
    add_generation_options(serve)

    chat = command("chat", _lazy("chat", "run"), "chat in the terminal (saved conversations)")
    chat.add_argument("-s", "--system", help="system prompt for new conversations")
    chat.add_argument("--conversation", type=int, help="open this saved conversation (its id)")
    add_model_options(chat)
    add_generation_options(chat)

    bench = command(
        "bench",
        _lazy("bench", "bench_command"),
        "plain vs. speculative decoding and llama.cpp's baselines, side by side",
    )
    add_model_options(bench)
    bench.add_argument("--workloads", type=Path, help="JSONL of prompts (default: shipped set)")
    bench.add_argument(
        "--modes",
        help="comma-separated modes (default: off,ngram,draft:2,draft:4,hybrid,auto): off, "
        "ngram[:K], draft:K, hybrid[:K], auto, lcp-lookup[:K] (llama-cpp-python's prompt "
        "lookup), server-off, server-draft[:K], server-ngram-simple, server-ngram-mod "
        "(llama-server), or all for the full grid",
    )
    bench.add_argument("--max-tokens", type=int, help="tokens per run (default 128, quick 48)")
    bench.add_argument("--repeats", type=int, help="passes over the prompts (default 2, quick 1)")
    bench.add_argument("--category", action="append", help="only these workload categories")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="one prompt per category, modes off,ngram,auto, 48 tokens, 1 repeat",
    )
    bench.add_argument("--llama-server", type=Path, help="llama-server binary (default: from PATH)")
    bench.add_argument("--json", type=Path, help="write the full results here")
    bench.add_argument("--chart", type=Path, help="write a PNG chart here (localspec[bench])")

    whatif = command(
        "whatif",
        _lazy("whatif", "whatif_command"),
        "replay a bench's answers under other policies and machines (no timing noise)",
    )
    whatif.add_argument("results", type=Path, help="a `localspec bench --json` file")
    whatif.add_argument(
        "--profile",
        type=Path,
        action="append",
        default=[],
        help="also predict for this machine profile (JSON printed by `localspec tune`)",
    )
    whatif.add_argument("--workloads", type=Path, help="the JSONL the bench ran (default: shipped)")
    whatif.add_argument("--no-machine", action="store_true", help="skip this machine's calibration")
    whatif.add_argument("--json", type=Path, help="write the predictions here")

    pull = command(
        "pull",
        _lazy("models", "pull_command"),
        "download models or pairs (default: the default pair)",
    )
    pull.add_argument("names", nargs="*", help="pair or model names from `localspec models`")
    pull.add_argument("--offline", action="store_true", help="only check what is cached")

    models = command(
        "models", _lazy("models", "models_command"), "known and installed models and pairs"
    )
    models.add_argument("--json", action="store_true", help="machine-readable output")

    doctor = command(
        "doctor",
        _lazy("doctor", "doctor_command"),
        "llama.cpp build, GPU offload, models, calibrations",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")

    tune = command(
        "tune",
        _lazy("doctor", "tune_command"),
        "measure this machine for --spec auto (cached otherwise)",
    )
    tune.add_argument("--recalibrate", action="store_true", help="measure again, replace the cache")
    add_model_options(tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # huggingface_hub prints its warnings through its own handler already
    logging.getLogger("huggingface_hub").propagate = False
    try:
        return int(args.handler(args))
    except LocalspecError as exc:
        if args.verbose:
            logging.exception("failed")
        print(f"localspec: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("localspec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, without Python's shutdown complaint
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
