"""`localspec bench`: one subcommand per benchmark, each with only the options it uses (the
bench's own module, so that the parser of every other command stays short).

`localspec bench` without a subcommand runs `engine`, the benchmark `bench` ran before it had
subcommands: `localspec bench --quick` is `localspec bench engine --quick` (`default_bench`).
A handler imports its benchmark only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from localspec.cli.arguments import (
    FIM_REQUESTS,
    add_model_options,
    at_least,
    number,
    seconds,
    slot_count,
    ubatch_size,
    whole,
)
from localspec.cli.subcommand import Handler, add_command

if TYPE_CHECKING:
    from localspec.cli.subcommand import Commands

DEFAULT_BENCH = "engine"
# bench edits --grammar: each choice, and whether its answers run under the grammar
GRAMMAR_CHOICES = {"both": (True, False), "on": (True,), "off": (False,)}
_SPEC_MODES = "localspec's --spec: auto, off, ngram, draft or hybrid"


def _run_engine(args: argparse.Namespace) -> int:
    from localspec.cli.bench import engine_bench_command  # noqa: PLC0415

    return engine_bench_command(args)


def _run_chat(args: argparse.Namespace) -> int:
    from localspec.cli.bench import chat_bench_command  # noqa: PLC0415

    return chat_bench_command(args)


def _run_editor(args: argparse.Namespace) -> int:
    from localspec.cli.bench_editor import editor_bench_command  # noqa: PLC0415

    return editor_bench_command(args)


def _run_concurrency(args: argparse.Namespace) -> int:
    from localspec.cli.bench_concurrency import concurrency_bench_command  # noqa: PLC0415

    return concurrency_bench_command(args)


def _run_agent(args: argparse.Namespace) -> int:
    from localspec.cli.bench_agent import agent_bench_command  # noqa: PLC0415

    return agent_bench_command(args)


def _run_processes(args: argparse.Namespace) -> int:
    from localspec.cli.bench_processes import processes_bench_command  # noqa: PLC0415

    return processes_bench_command(args)


def _run_edits(args: argparse.Namespace) -> int:
    from localspec.cli.bench_edits import edits_bench_command  # noqa: PLC0415

    return edits_bench_command(args, GRAMMAR_CHOICES[args.grammar])


def _run_prompt(args: argparse.Namespace) -> int:
    from localspec.cli.bench_prompt import prompt_bench_command  # noqa: PLC0415

    return prompt_bench_command(args)


def _run_watch_cost(args: argparse.Namespace) -> int:
    from localspec.cli.bench_watch import watch_cost_command  # noqa: PLC0415

    return watch_cost_command(args)


def add_bench(commands: Commands) -> None:
    """`localspec bench` and its benchmarks."""
    bench = commands.add_parser(
        "bench",
        help="benchmarks: plain vs. speculative decoding, llama.cpp's baselines, editors, agents",
        description="Benchmarks, one per subcommand (default: engine; `localspec bench "
        "--quick` is `localspec bench engine --quick`). Each prints its table on stdout, "
        "progress on stderr, and writes --json FILE.",
    )
    benches = bench.add_subparsers(
        dest="bench", required=True, title="benchmarks", metavar="BENCHMARK"
    )
    for add in (
        _engine,
        _chat,
        _editor,
        _concurrency,
        _prompt,
        _agent,
        _processes,
        _edits,
        _watch_cost,
    ):
        add(benches)


_OLD_FORMS = {
    "--editor": "localspec bench editor",
    "--concurrency": "localspec bench concurrency",
    "--agent": "localspec bench agent [TRACE ...]",
    "--processes": "localspec bench processes",
    "--watch-cost": "localspec bench watch-cost",
    "--surface": "localspec bench chat` (or `localspec bench engine",
    "--concurrency-fim": "localspec bench concurrency --fim-requests N",
    "--concurrency-chat-tokens": "localspec bench concurrency --chat-tokens M",
    "--concurrency-delay": "localspec bench concurrency --delay S",
    "--concurrency-context": "localspec bench concurrency --chat-context FILE",
}
"""What the flags of `bench` before it had subcommands became: the flags that chose a
benchmark are subcommands, and `--concurrency`'s options were renamed."""


def default_bench(argv: Sequence[str]) -> list[str]:
    """`argv` with `engine` after a `bench` that names no benchmark; `--help` still lists
    them. The command is the first argument that is not an option (`localspec`'s own options
    take no value). The flags that chose a benchmark before are a usage error (exit 2) that
    names the subcommand, not argparse's bare "unrecognized arguments"."""
    args = list(argv)
    command = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
    if command is None or args[command] != "bench":
        return args
    _refuse_old_forms(args[command + 1 :])
    following = args[command + 1 : command + 2]
    if (following and not following[0].startswith("-")) or following in (["-h"], ["--help"]):
        return args
    return [*args[: command + 1], DEFAULT_BENCH, *args[command + 1 :]]


def _refuse_old_forms(args: Sequence[str]) -> None:
    """Exit 2 with the new form of the first flag that chose a benchmark or was renamed."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _OLD_FORMS:
            print(
                f"localspec bench: error: {flag} is gone: use `{_OLD_FORMS[flag]}` "
                f"(`localspec bench --help` lists the benchmarks)",
                file=sys.stderr,
            )
            raise SystemExit(2)


def _add(benches: Commands, name: str, handler: Handler, help_: str) -> argparse._ArgumentGroup:
    """Benchmark `name`: the model options and, in a group of its own, `--json`; returns that
    group for the benchmark's other options."""
    parser = add_command(benches, name, handler, help_)
    add_model_options(parser)
    group = parser.add_argument_group("benchmark")
    group.add_argument("--json", type=Path, metavar="FILE", help="write the full results here")
    return group


def _workloads(group: argparse._ArgumentGroup, shipped: str, quick: str) -> None:
    """The prompts: a JSONL file (default: `shipped`), its categories, and --quick, which
    takes one prompt per category and what `quick` says."""
    group.add_argument(
        "--workloads", type=Path, metavar="FILE", help=f"JSONL of prompts (default: {shipped})"
    )
    group.add_argument(
        "--category", action="append", metavar="NAME", help="only this category (repeatable)"
    )
    also = f", {quick}" if quick else ""
    group.add_argument(
        "--quick",
        action="store_true",
        help=f"one prompt per category{also} (options given explicitly win)",
    )


def _budget(group: argparse._ArgumentGroup, tokens: str, repeats: str) -> None:
    group.add_argument("--max-tokens", type=whole, metavar="N", help=f"tokens per run ({tokens})")
    group.add_argument("--repeats", type=whole, metavar="N", help=f"passes ({repeats})")


def _seed(group: argparse._ArgumentGroup, what: str) -> None:
    group.add_argument(
        "--seed",
        type=whole,
        default=0,
        metavar="N",
        help=f"seed of the modes' order, shuffled for every {what} (default 0)",
    )


def _llama_server(group: argparse._ArgumentGroup, used: str) -> None:
    group.add_argument(
        "--llama-server",
        type=Path,
        metavar="PATH",
        help=f"llama-server binary {used} (default: from PATH)",
    )


def _engine(benches: Commands) -> None:
    group = _add(
        benches,
        "engine",
        _run_engine,
        "plain vs. speculative decoding and llama.cpp's baselines, side by side (the default)",
    )
    _workloads(group, "the shipped set", "modes off,ngram,auto, 48 tokens, 1 repeat")
    group.add_argument(
        "--modes",
        help="comma-separated modes (default: off,ngram,draft:2,draft:4,hybrid,auto): off, "
        "ngram[:K], draft:K, hybrid[:K], auto, lcp-lookup[:K] (llama-cpp-python's prompt "
        "lookup), server-off, server-draft[:K], server-ngram-simple, server-ngram-mod, "
        "server-ngram-cache, server-spec-default (llama-server), or all for the full grid; a "
        "speculative localspec mode may end in +no-suffix (without suffix drafts) or "
        "+batch-ties",
    )
    _budget(
        group,
        "default 128, quick 48",
        "default 3, quick 1; each mode's ratio to off carries a 95%% bootstrap interval over them",
    )
    _seed(group, "prompt and repeat")
    _llama_server(group, "for the server-* modes")
    group.add_argument(
        "--profile",
        action="store_true",
        help="also print where localspec's modes spend each step, by kind of step (drafted "
        "nothing, n-gram or draft model, tokens drafted): the engine's overhead outside "
        "llama_decode against off's plain step",
    )
    group.add_argument(
        "--chart", type=Path, metavar="FILE.png", help="write a PNG chart here (localspec[bench])"
    )


def _chat(benches: Commands) -> None:
    group = _add(
        benches,
        "chat",
        _run_chat,
        "the chat app, driven headless, against `complete` on the same questions (tok/s and "
        "their ratio)",
    )
    _workloads(group, "the shipped chat.jsonl", "48 tokens, 1 repeat")
    group.add_argument("--modes", help="comma-separated localspec modes (default: auto)")
    _budget(group, "default 128, quick 48", "default 2, quick 1")


def _editor(benches: Commands) -> None:
    group = _add(
        benches,
        "editor",
        _run_editor,
        "replay llama.vim's requests over a seeded editing session against `localspec serve` "
        "and llama-server --cache-reuse 256, side by side (--ctx-size default 16384)",
    )
    group.add_argument("--modes", metavar="MODE", help=f"{_SPEC_MODES} (default auto)")
    _llama_server(group, "to compare with")
    _session(group)
    group.add_argument(
        "--fim-requests",
        type=at_least(1),
        metavar="N",
        help=f"completions in the session, speculative ones included (default {FIM_REQUESTS})",
    )
    group.add_argument(
        "--t-max-prompt-ms",
        action="store_true",
        help="send llama.vim's t_max_prompt_ms (500, warm-ups 1): localspec stops prompt "
        "processing there, llama-server ignores it, so the two do different work",
    )
    group.add_argument(
        "--numerics",
        action="store_true",
        help="also measure shifted KV reuse against cold prefills on the replay's prompts",
    )


def _session(group: argparse._ArgumentGroup) -> None:
    """The editing session the editor's requests come from, and whether its server is watched."""
    group.add_argument(
        "--editor-file",
        type=Path,
        metavar="PATH",
        help="the source file to edit, the only one open (default: shipped copies of CPython's "
        "difflib.py, edited, and heapq.py, visited)",
    )
    group.add_argument(
        "--session-seed", type=whole, default=0, metavar="N", help="the session's seed (default 0)"
    )
    group.add_argument(
        "--watch",
        type=Path,
        metavar="FILE",
        help="localspec serve records the session in the history (`localspec stats`) and "
        "serves /metrics, whose last scrape goes to FILE (default: neither: a benchmark is not "
        "your work)",
    )


def _concurrency(benches: Commands) -> None:
    group = _add(
        benches,
        "concurrency",
        _run_concurrency,
        "llama.vim's completions alone, a streaming chat answer alone, then the two at once, "
        "against `localspec serve` and llama-server -np 3, side by side: FIM round trips and "
        "the chat's tok/s alone and together (--ctx-size default 16384)",
    )
    group.add_argument("--modes", metavar="MODE", help=f"{_SPEC_MODES} (default auto)")
    group.add_argument("--repeats", type=whole, metavar="N", help="passes (default 3)")
    _llama_server(group, "to compare with")
    _session(group)
    group.add_argument(
        "--fim-requests",
        type=at_least(1),
        default=8,
        metavar="N",
        help="completions sent alone and during the chat (default 8)",
    )
    group.add_argument(
        "--chat-tokens",
        type=at_least(1),
        default=300,
        metavar="M",
        help="max_tokens of the chat answer (default 300)",
    )
    group.add_argument(
        "--delay",
        type=number,
        default=1.0,
        metavar="SECONDS",
        help="after the chat's first token, wait this long before the completions (default 1)",
    )
    group.add_argument(
        "--chat-context",
        type=Path,
        metavar="FILE",
        help="the chat carries FILE's text before its question, new to the server every time, "
        "as an agent's turn carries a file; the completions start --delay seconds after the "
        "chat is sent, while its prompt is processed",
    )
    _contenders(group)


def _contenders(group: argparse._ArgumentGroup) -> None:
    """The `localspec serve` settings `concurrency` and `prompt` compare."""
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
        type=slot_count,
        metavar="N",
        help="start `localspec serve --parallel N` (default: the server's own default)",
    )


def prompt_sizes(text: str) -> list[int]:
    """An argparse type: comma-separated prompt sizes in tokens, each 64 or more."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated numbers") from None
    if not sizes or min(sizes) < 64 or max(sizes) > 1 << 20:
        raise argparse.ArgumentTypeError(f"each size is 64 to 1048576 tokens, not {text}")
    return sizes


def _prompt(benches: Commands) -> None:
    group = _add(
        benches,
        "prompt",
        _run_prompt,
        "long prompts new to each server, `localspec serve` against llama-server, side by "
        "side: the time to the first token at 4k, 8k and 16k tokens, alone and, with "
        "--editor-every, while an editor sends completions (--ctx-size default 32768)",
    )
    group.add_argument("--modes", metavar="MODE", help=f"{_SPEC_MODES} (default auto)")
    group.add_argument(
        "--sizes",
        type=prompt_sizes,
        metavar="N,N,...",
        help="prompt sizes in tokens (default 4096,8192,16384)",
    )
    group.add_argument("--repeats", type=whole, metavar="N", help="passes (default 3)")
    _llama_server(group, "to compare with")
    group.add_argument(
        "--editor-every",
        type=seconds,
        metavar="S",
        help="also process each size while an editor sends a llama.vim completion every S "
        "seconds (llama-server then runs 2 slots)",
    )
    _contenders(group)


def _agent(benches: Commands) -> None:
    group = _add(
        benches,
        "agent",
        _run_agent,
        "replay coding agents' recorded requests against `localspec serve`, each turn in each "
        "mode (--ctx-size default 32768)",
    )
    group.add_argument(
        "traces",
        nargs="*",
        type=Path,
        metavar="TRACE",
        help="`serve --record` files (default: the shipped Claude Code, Codex CLI and opencode "
        "traces)",
    )
    group.add_argument(
        "--interactive",
        action="store_true",
        help="replay the shipped interactive sessions instead: the clients' own terminal UIs, "
        "with their side requests (titles, topic checks) between turns",
    )
    group.add_argument(
        "--modes",
        help=f"comma-separated {_SPEC_MODES}, a speculative one may end in +no-suffix or "
        "+batch-ties (default off,auto)",
    )
    _budget(group, "a turn, default 256", "default 1")
    _seed(group, "turn and repeat")
    group.add_argument(
        "--parallel",
        type=slot_count,
        metavar="N",
        help="start `localspec serve --parallel N` (default: the server's own default); at 1 "
        "an agent's side requests share the conversation's slot",
    )


def _processes(benches: Commands) -> None:
    group = _add(
        benches,
        "processes",
        _run_processes,
        "each prompt and mode as its own `localspec complete --no-server` process, as a user "
        "runs it (loading, the tuner's saved state and the draft's catch-up included)",
    )
    _workloads(group, "the shipped complete.jsonl", "1 repeat")
    group.add_argument(
        "--modes", help=f"comma-separated {_SPEC_MODES}, off included (default off,auto)"
    )
    _budget(group, "default 160", "default 3, quick 1")
    _seed(group, "prompt and repeat")
    group.add_argument(
        "--profile",
        action="store_true",
        help="also print where the modes spend each step, by kind of step",
    )


def _edits(benches: Commands) -> None:
    group = _add(
        benches,
        "edits",
        _run_edits,
        "change requests on small files of several languages, answered as the chat asks for "
        "them, with the edit grammar and without: applied, correct, tok/s",
    )
    group.add_argument(
        "--tasks", type=Path, metavar="FILE", help="TOML of tasks (default: the shipped edits.toml)"
    )
    group.add_argument("--task", action="append", metavar="ID", help="only this task (repeatable)")
    group.add_argument(
        "--language", action="append", metavar="NAME", help="only this language (repeatable)"
    )
    group.add_argument("--quick", action="store_true", help="one task per language")
    group.add_argument("--modes", help=f"comma-separated {_SPEC_MODES} (default auto, the chat's)")
    group.add_argument(
        "--grammar",
        choices=sorted(GRAMMAR_CHOICES),
        default="both",
        help="answers under the edit grammar (on), free (off), or both side by side (default)",
    )
    group.add_argument(
        "--max-tokens", type=whole, metavar="N", help="tokens per answer (default 512, the chat's)"
    )
    _seed(group, "task")


def _watch_cost(benches: Commands) -> None:
    group = _add(
        benches,
        "watch-cost",
        _run_watch_cost,
        "what serve --metrics and the history cost: the chat questions generated with the "
        "watchers listening and without, ABBA, in one run",
    )
    _workloads(group, "the shipped chat.jsonl", "")
    group.add_argument("--modes", metavar="MODE", help="one localspec mode (default auto)")
    _budget(group, "default 128", "default 4")
