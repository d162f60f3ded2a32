"""`localspec bench agent [TRACE ...]`: coding agents' recorded requests against one
`localspec serve`, each turn in each mode (`localspec.bench.agent`).

Without a trace, the shipped ones (Claude Code, Codex CLI and opencode on small tasks, run
once; with `--interactive`, in their own UIs); a trace is a `serve --record` file. The
report goes to stdout, progress to stderr, `--json` to a file.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from localspec.bench import agent
from localspec.bench.editor import localspec_command
from localspec.bench.modes import MODIFIERS, parse_mode
from localspec.bench.progress import Progress
from localspec.bench.server_process import ServerProcess, free_port
from localspec.cli.bench_files import check_writable, model_settings, write_file
from localspec.cli.options import runtime_settings
from localspec.errors import BenchServerError, UsageError
from localspec.llama.params import default_threads
from localspec.speculative.settings import SpecMode

AGENT_CTX_SIZE = 32768
"""Room for Claude Code's ~18,600-token system prompt and tools, and the turns after it."""
DEFAULT_MODES = "off,auto"


def agent_bench_command(args: argparse.Namespace) -> int:
    check_writable(args.json)
    modes = _modes(args.modes or DEFAULT_MODES)
    if args.traces and args.interactive:
        raise UsageError("--interactive replays the shipped interactive traces: give it or TRACEs")
    traces = list(args.traces) or agent.shipped_traces(interactive=args.interactive)
    turns = [turn for path in traces for turn in agent.load_trace(path)]
    repeats = 1 if args.repeats is None else args.repeats
    max_tokens = agent.DEFAULT_MAX_TOKENS if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise UsageError("--repeats and --max-tokens must be at least 1")
    if args.ctx_size is None:
        args.ctx_size = AGENT_CTX_SIZE
    need_draft = True if any(parse_mode(m).uses_draft_model for m in modes) else None
    settings = runtime_settings(args, need_draft, ngram_cache=False)
    progress = Progress(sys.stderr)
    threads = settings.n_threads or default_threads()
    port = free_port()
    command = localspec_command(settings, "auto", threads, port, parallel=args.parallel)
    servers = _Sessions(command, port, progress)
    try:
        progress.start(len(turns) * len(modes) * repeats)
        run = agent.replay(
            turns,
            modes,
            repeats=repeats,
            max_tokens=max_tokens,
            post=servers.post,
            seed=args.seed,
            done=lambda r: progress.run_done(
                f"{r.agent} {r.index} {r.kind}", r.mode, r.generated / max(r.decode_s, 1e-9)
            ),
            session=servers.fresh,
        )
    finally:
        servers.close()
    progress.finish()
    rows = agent.summarise(run.results, modes)
    names = ", ".join(
        f"{path.stem} ({sum(t.agent == path.stem for t in turns)})" for path in traces
    )
    print(f"agent traces: {names}; {repeats} repeat(s), at most {max_tokens} tokens a turn")
    print(agent.format_report(rows, run.results, modes))
    work = agent.prompt_work(turns, run.results)
    print(agent.format_prompt_work(work))
    for failure in run.failures:
        print(f"failed: {failure}")
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "threads": threads,
            "parallel": args.parallel,
            "modes": modes,
            "repeats": repeats,
            "seed": args.seed,
            "max_tokens": max_tokens,
            "traces": [str(path) for path in traces],
        }
        write_file(args.json, agent.document(rows, run.results, run_settings, work))
    return 1 if run.failures and not run.results else 0


class _Sessions:
    """One `localspec serve` per repeat: each repeat is a session of its own, whose suffix
    store and caches hold nothing of an earlier repeat's answers."""

    def __init__(self, command: list[str], port: int, progress: Progress) -> None:
        self.command = command
        self.port = port  # the one `command` serves on
        self.progress = progress
        self.server: ServerProcess | None = None

    def fresh(self, repeat: int) -> None:
        self.close()
        self.progress.note(f"starting localspec serve (repeat {repeat + 1})")
        self.server = ServerProcess("localspec", self.command, self.port)
        problem = self.server.wait_ready()
        if problem is not None:
            raise BenchServerError(f"localspec serve did not start: {problem}")

    def post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        assert self.server is not None, "a session starts before its first request"
        return self.server.post(path, body)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _modes(text: str) -> list[str]:
    """localspec's --spec modes, a speculative one with the bench's modifiers if asked
    (`auto+no-suffix`), no draft lengths: the server's own settings apply."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if not _replayable(name)]
    if unknown or not names:
        known = ", ".join(sorted(mode.value for mode in SpecMode))
        raise UsageError(
            f"--modes of `bench agent` are localspec's --spec modes ({known}), a speculative one "
            f"may end in {' or '.join(MODIFIERS)}; not {', '.join(unknown) or 'nothing'}"
        )
    return list(dict.fromkeys(names))


def _replayable(name: str) -> bool:
    """A localspec mode without a draft length (`bench agent` sends the mode, not its
    lengths)."""
    try:
        mode = parse_mode(name)
    except UsageError:
        return False
    return mode.spec is not None and mode.k is None
