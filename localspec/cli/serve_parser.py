"""`localspec serve`'s options: the shared ones (model, speculation, sampling, limits) and the
server's own, grouped as `--help` shows them (the serve module's own file, so that the parser
of every other command stays short)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from localspec.cli.arguments import (
    DEFAULT_CACHE_DISK_MIB,
    DEFAULT_CACHE_DISK_MIN,
    DEFAULT_CACHE_RAM_MIB,
    DEFAULT_CACHE_REUSE,
    DEFAULT_PARALLEL,
    DEFAULT_PROMPT_HOLD_S,
    LIMITS,
    MAX_PARALLEL,
    MAX_QUEUE,
    SERVER,
    add_generation_options,
    add_model_options,
    add_watch_options,
    at_least,
    option_group,
    seconds,
    slot_count,
    waiting_count,
    whole,
)
from localspec.cli.limit_args import add_request_limit_options
from localspec.cli.subcommand import add_command

if TYPE_CHECKING:
    from localspec.cli.subcommand import Commands

PROMPT_CACHE = "prompt cache"
BODY_TIMEOUT_S = 60.0  # `serve --body-timeout` (localspec.server.body's, without the server)


def _run_serve(args: argparse.Namespace) -> int:
    from localspec.cli.serve import serve_command  # noqa: PLC0415

    return serve_command(args)


def add_serve(commands: Commands) -> None:
    """`localspec serve` and its options."""
    serve = add_command(
        commands,
        "serve",
        _run_serve,
        "serve editors and OpenAI clients on a Unix socket (and TCP with --port)",
    )
    add_model_options(serve)
    # the generation options are the defaults of requests that leave them out; a request
    # without max_tokens may run to the end of the context, as llama-server's do
    add_generation_options(serve, max_tokens=None)
    add_watch_options(serve)
    add_request_limit_options(serve)
    option_group(serve, LIMITS).add_argument(
        "--max-body",
        type=at_least(1),
        metavar="BYTES",
        help="largest request body accepted (beyond: 413; default 8 MiB plus 16 bytes per "
        "context token)",
    )
    _server_options(option_group(serve, SERVER))
    _prompt_cache_options(serve.add_argument_group(PROMPT_CACHE))


def _server_options(server: argparse._ArgumentGroup) -> None:
    """Where it listens, who may ask, and how requests share the models."""
    server.add_argument("--socket", type=Path, help="Unix socket path (default: runtime dir)")
    server.add_argument("--no-socket", action="store_true", help="no Unix socket (TCP only)")
    server.add_argument("--port", type=whole, help="also listen on TCP 127.0.0.1:PORT (0: any)")
    server.add_argument(
        "--host", default="127.0.0.1", help="TCP address (other than loopback: with a warning)"
    )
    server.add_argument("--no-auth", action="store_true", help="TCP without the bearer token")
    server.add_argument(
        "--show-token", action="store_true", help="print the TCP bearer token and exit"
    )
    server.add_argument(
        "--queue",
        type=waiting_count,
        default=4,
        metavar="N",
        help=f"requests that may wait (beyond: 503; default 4, at most {MAX_QUEUE})",
    )
    server.add_argument(
        "--parallel",
        "-np",
        type=slot_count,
        default=DEFAULT_PARALLEL,
        metavar="N",
        help="slots: sequences whose caches are kept apart (an editor, a chat, an agent); "
        "an editor's request interrupts a running answer at its next step "
        f"(default {DEFAULT_PARALLEL}, at most {MAX_PARALLEL}; 1: arrival order)",
    )
    server.add_argument(
        "--body-timeout",
        type=seconds,
        default=BODY_TIMEOUT_S,
        metavar="S",
        help="how long a request body may take to arrive whole (beyond: 408; default "
        f"{BODY_TIMEOUT_S:g}; 0: no limit)",
    )
    server.add_argument(
        "--prompt-hold",
        type=seconds,
        metavar="S",
        help="how long editors' requests may keep another request's prompt from moving on: "
        "they stop it, within a llama.cpp call too, until it has gone S seconds without "
        f"finishing a call (default {DEFAULT_PROMPT_HOLD_S:g}; 0: only between calls; needs "
        "--parallel 2 or more)",
    )
    server.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="append every generation request's body to FILE (JSON lines, 0600), for "
        "`localspec bench agent FILE`: record an agent's session to replay it",
    )
    server.add_argument(
        "--model-alias",
        action="append",
        default=[],
        metavar="NAME",
        help="another name /v1/models lists for the served model (repeatable); agents send "
        "the model names they were configured with",
    )
    server.add_argument(
        "--strict-model-names",
        action="store_true",
        help="refuse (404) requests naming a model other than the served id, an alias or the "
        "file name (default: any name is served by the loaded model, as llama-server does)",
    )
    server.add_argument(
        "--keep-client-headers",
        action="store_true",
        help="keep the lines agents put in front of their prompts that change per request "
        "(Claude Code's x-anthropic-billing-header line, whose hash would make every turn "
        "process the whole prompt again); default: left out of the prompt",
    )
    server.add_argument(
        "--metrics",
        action="store_true",
        help="serve GET /metrics in Prometheus' text format: llama-server's llamacpp: series "
        "and localspec_ ones by route, model pair, mode and constraint (default: off)",
    )


def _prompt_cache_options(cache: argparse._ArgumentGroup) -> None:
    """What is kept of earlier prompts, in memory and on disk."""
    cache.add_argument(
        "--cache-reuse",
        type=at_least(0, "0: reuse only the common prefix"),
        default=DEFAULT_CACHE_REUSE,
        metavar="N",
        help="reuse cached chunks of at least N tokens that moved in a new prompt by shifting "
        "them, as llama-server's --cache-reuse (editors move text: the prefix window, a "
        "ring of extra chunks); the default of requests without n_cache_reuse (default "
        f"{DEFAULT_CACHE_REUSE}; 0: the common prefix only)",
    )
    cache.add_argument(
        "--cache-ram",
        type=at_least(0, "0: no prompt cache"),
        default=DEFAULT_CACHE_RAM_MIB,
        metavar="MIB",
        help="keep KV states of earlier prompts in up to MIB of memory, so that coming back to "
        "a file or conversation processes nothing again, as llama-server's --cache-ram "
        f"(default {DEFAULT_CACHE_RAM_MIB}, at most a quarter of RAM; 0: off)",
    )
    cache.add_argument(
        "--cache-disk",
        type=at_least(0, "0: no prompt states on disk"),
        default=DEFAULT_CACHE_DISK_MIB,
        metavar="MIB",
        help="keep KV states of long prompts (an agent's system prompt and tools) in up to MIB "
        "of files in the cache folder, so a restarted server does not process them again "
        f"(default {DEFAULT_CACHE_DISK_MIB}; 0: off)",
    )
    cache.add_argument(
        "--cache-disk-min",
        type=at_least(1),
        default=DEFAULT_CACHE_DISK_MIN,
        metavar="TOKENS",
        help="the shortest prompt whose state goes to disk, and half of it the least a new state "
        f"must add to a stored one (default {DEFAULT_CACHE_DISK_MIN})",
    )
