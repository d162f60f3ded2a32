"""`localspec bench`'s options: the engine bench, the chat surface, the editor and
concurrency replays, the agents' turns and the processes (the bench's own module, so that
the parser of every other command stays short)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from localspec.cli.arguments import (
    FIM_REQUESTS,
    add_model_options,
    at_least,
    seconds,
    ubatch_size,
)
from localspec.cli.subcommand import add_command

if TYPE_CHECKING:
    from localspec.cli.subcommand import Commands


def _run_bench(args: argparse.Namespace) -> int:
    from localspec.cli.bench import bench_command  # noqa: PLC0415

    return bench_command(args)


def add_bench(commands: Commands) -> None:
    """`localspec bench` and its options (the editor and concurrency replays' too)."""
    bench = add_command(
        commands,
        "bench",
        _run_bench,
        "plain vs. speculative decoding and llama.cpp's baselines, side by side",
    )
    add_model_options(bench)
    bench.add_argument(
        "--surface",
        choices=("engine", "chat"),
        default="engine",
        help="engine: the modes side by side (default); chat: the chat app, driven headless, "
        "against `complete` on the same prompts (tok/s and their ratio)",
    )
    bench.add_argument("--workloads", type=Path, help="JSONL of prompts (default: shipped set)")
    bench.add_argument(
        "--modes",
        help="comma-separated modes (default: off,ngram,draft:2,draft:4,hybrid,auto; with "
        "--surface chat: auto): off, ngram[:K], draft:K, hybrid[:K], auto, lcp-lookup[:K] "
        "(llama-cpp-python's prompt lookup), server-off, server-draft[:K], server-ngram-simple, "
        "server-ngram-mod, server-ngram-cache, server-spec-default (llama-server), or all for "
        "the full grid; a speculative localspec mode may end in +no-suffix (without suffix "
        "drafts) or +batch-ties",
    )
    bench.add_argument("--max-tokens", type=int, help="tokens per run (default 128, quick 48)")
    bench.add_argument(
        "--repeats",
        type=int,
        help="passes over the prompts (default 3, --surface chat 2, quick 1); each mode's ratio "
        "to off carries a 95%% bootstrap interval over them",
    )
    bench.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the modes' order, shuffled for every prompt and repeat (default 0; "
        "--agent: every turn and repeat)",
    )
    bench.add_argument("--category", action="append", help="only these workload categories")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="one prompt per category, modes off,ngram,auto, 48 tokens, 1 repeat (options "
        "given explicitly win)",
    )
    bench.add_argument(
        "--llama-server",
        type=Path,
        help="llama-server binary for the server-* modes (default: from PATH)",
    )
    bench.add_argument("--json", type=Path, help="write the full results here")
    bench.add_argument(
        "--profile",
        action="store_true",
        help="also print where localspec's modes spend each step, by kind of step (drafted "
        "nothing, n-gram or draft model, tokens drafted): the engine's overhead outside "
        "llama_decode against off's plain step",
    )
    bench.add_argument("--chart", type=Path, help="write a PNG chart here (localspec[bench])")
    _editor_options(bench)
    _concurrency_options(bench)
    bench.add_argument(
        "--watch-cost",
        action="store_true",
        help="what serve --metrics and the history cost: the chat questions generated with the "
        "watchers listening and without, ABBA, in one run (--modes: one mode, default auto; "
        "--repeats default 4, --max-tokens default 128)",
    )
    bench.add_argument(
        "--processes",
        action="store_true",
        help="run each prompt and mode as its own `localspec complete --no-server` process, "
        "as a user runs it (loading, the tuner's saved state and the draft's catch-up "
        "included); default prompts: the shipped complete.jsonl, modes off,auto, 160 tokens, "
        "3 repeats",
    )
    bench.add_argument(
        "--agent",
        nargs="*",
        type=Path,
        metavar="TRACE",
        help="replay coding agents' recorded requests (`serve --record` files; none given: the "
        "shipped Claude Code, Codex CLI and opencode traces) against `localspec serve`, each "
        "turn in each of --modes (default off,auto; --spec names), --max-tokens a turn "
        "(default 256), --repeats (default 1); --ctx-size default 32768",
    )


def _editor_options(bench: argparse.ArgumentParser) -> None:
    editor = bench.add_argument_group("editor replay (--editor)")
    editor.add_argument(
        "--editor",
        action="store_true",
        help="replay llama.vim's requests over a seeded editing session against `localspec "
        "serve` and llama-server --cache-reuse 256 (--llama-server or PATH), side by side; "
        "--modes: localspec's --spec (default auto); --ctx-size default 16384",
    )
    editor.add_argument(
        "--fim-requests",
        type=at_least(1),
        metavar="N",
        help=f"completions in the session, speculative ones included (default {FIM_REQUESTS})",
    )
    editor.add_argument(
        "--session-seed", type=int, default=0, metavar="N", help="the session's seed (default 0)"
    )
    editor.add_argument(
        "--editor-file",
        type=Path,
        metavar="PATH",
        help="the source file to edit, the only one open (default: shipped copies of CPython's "
        "difflib.py, edited, and heapq.py, visited)",
    )
    editor.add_argument(
        "--t-max-prompt-ms",
        action="store_true",
        help="send llama.vim's t_max_prompt_ms (500, warm-ups 1): localspec stops prompt "
        "processing there, llama-server ignores it, so the two do different work",
    )
    editor.add_argument(
        "--watch",
        type=Path,
        metavar="FILE",
        help="--editor, --concurrency: localspec serve records the session in the history "
        "(`localspec stats`) and serves /metrics, whose last scrape goes to FILE (default: "
        "neither: a benchmark is not your work)",
    )
    editor.add_argument(
        "--numerics",
        action="store_true",
        help="also measure shifted KV reuse against cold prefills on the replay's prompts",
    )


def _concurrency_options(bench: argparse.ArgumentParser) -> None:
    group = bench.add_argument_group("editor during a chat (--concurrency)")
    group.add_argument(
        "--concurrency",
        action="store_true",
        help="llama.vim's completions alone, a streaming chat answer alone, then the two at "
        "once, against `localspec serve` and llama-server -np 3 (--llama-server or PATH), side "
        "by side: FIM round trips and the chat's tok/s alone and together; --repeats (default "
        "3), --modes: localspec's --spec (default auto), --editor-file and --session-seed shape "
        "the completions; --ctx-size default 16384",
    )
    group.add_argument(
        "--concurrency-fim",
        type=at_least(1),
        default=8,
        metavar="N",
        help="completions sent alone and during the chat (default 8)",
    )
    group.add_argument(
        "--concurrency-chat-tokens",
        type=at_least(1),
        default=300,
        metavar="M",
        help="max_tokens of the chat answer (default 300)",
    )
    group.add_argument(
        "--concurrency-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="after the chat's first token, wait this long before the completions (default 1)",
    )
    group.add_argument(
        "--concurrency-context",
        type=Path,
        metavar="FILE",
        help="the chat carries FILE's text before its question, new to the server every time, "
        "as an agent's turn carries a file; the completions start --concurrency-delay seconds "
        "after the chat is sent, while its prompt is processed",
    )
    group.add_argument(
        "--compare-ubatch",
        type=ubatch_size,
        metavar="N",
        help="also run `localspec serve --ubatch-size N` as a contender of its own (a second "
        "server: the models are loaded twice)",
    )
    group.add_argument(
        "--compare-prompt-hold",
        type=seconds,
        metavar="S",
        help="also run `localspec serve --prompt-hold S` as a contender of its own (a second "
        "server: the models are loaded twice)",
    )
    group.add_argument(
        "--parallel",
        type=at_least(1),
        metavar="N",
        help="start `localspec serve --parallel N` (default: the server's own default)",
    )
