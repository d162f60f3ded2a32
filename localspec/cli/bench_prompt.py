"""`localspec bench prompt`: long prompts, `localspec serve` against llama-server, side by
side (`localspec.bench.prompt_speed`).

The prompts are localspec's own source files (code, as an agent's turns carry), cut to each
size; the editor's completions, with `--editor-every`, are the editor bench's session's. The
servers start as the editor bench starts them (the same threads; llama-server with a batch
of half the context and its own default ubatch). The table goes to stdout, progress to
stderr, `--json` to a file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import localspec
from localspec.bench.editor import LLAMA_SERVER, LOCALSPEC, EditorOptions, prepared, running_servers
from localspec.bench.editor_session import editor_session, shipped_files
from localspec.bench.llama_vim import WARMUP
from localspec.bench.progress import Progress
from localspec.bench.prompt_speed import (
    DEFAULT_REPEATS,
    DEFAULT_SIZES,
    PromptCase,
    PromptRun,
    PromptSpeedOptions,
    PromptSpeedResult,
    prompt_cases,
    run_prompt_speed,
    summarise,
)
from localspec.bench.prompt_speed_report import format_prompt_report, prompt_document
from localspec.cli.bench_editor import serve_spec
from localspec.cli.bench_files import check_writable, model_settings, on_path, write_file
from localspec.cli.options import runtime_settings
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings

PROMPT_CTX_SIZE = 32768
"""Room for the largest default prompt (16,384 tokens) with its lead and answer."""
TEXT_CHARS = 400_000
"""Source text read for the prompts: ~100k tokens of code, enough for 16k-token prompts
taken from different places."""
EDITOR_COMPLETIONS = 8


def source_text(limit: int = TEXT_CHARS) -> str:
    """localspec's own Python files, each under a line naming it, up to `limit` characters."""
    package = Path(localspec.__file__).resolve().parent
    parts, total = [], 0
    for path in sorted(package.rglob("*.py")):
        part = f"# file: {path.relative_to(package.parent)}\n{path.read_text(encoding='utf-8')}"
        parts.append(part)
        total += len(part)
        if total >= limit:
            break
    return "\n".join(parts)[:limit]


def prompt_bench_command(args: argparse.Namespace) -> int:
    check_writable(args.json)
    spec = serve_spec(args, "prompt")
    sizes = tuple(args.sizes or DEFAULT_SIZES)
    repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    if args.ctx_size is None:
        args.ctx_size = max(PROMPT_CTX_SIZE, max(sizes) + 64)
    if max(sizes) + 2 > args.ctx_size or min(sizes) < 64:
        raise UsageError(
            f"--sizes must lie between 64 and the context less 2 ({args.ctx_size - 2} tokens): "
            f"raise --ctx-size"
        )
    settings = runtime_settings(args, None, ngram_cache=False)
    options = PromptSpeedOptions(sizes, repeats, args.editor_every)
    server_options = EditorOptions(
        spec=spec.value,
        llama_server=args.llama_server or on_path("llama-server"),
        llama_slots=1 if args.editor_every is None else 2,
        parallel=args.parallel,
        compare_ubatch=args.compare_ubatch,
        compare_prompt_hold=args.compare_prompt_hold,
    )
    completions = [
        prepared(request.body, t_max_prompt=False)
        for request in editor_session(shipped_files(), fim_requests=EDITOR_COMPLETIONS)
        if request.kind != WARMUP
    ]
    result = _run(settings, server_options, options, completions)
    summaries = summarise(result.runs)
    phases = "alone" + (
        f" and while an editor sends a completion every {args.editor_every:g} s"
        if args.editor_every is not None
        else ""
    )
    heading = (
        f"prompts of {', '.join(map(str, sizes))} tokens of code, new to each server, "
        f"{phases}; round trips to the first token, medians over {repeats} repeat(s) (min-max)"
    )
    print(
        format_prompt_report(
            summaries, result.runs, result.skipped, base=LLAMA_SERVER,
            heading=heading,
        )
    )  # fmt: skip
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "threads": settings.n_threads,
            "spec": spec.value,
            "flash_attn": settings.flash_attn,
            "ubatch": settings.ubatch,
            "parallel": args.parallel,
            "compare_ubatch": args.compare_ubatch,
            "compare_prompt_hold": args.compare_prompt_hold,
            "llama_server": str(llama) if (llama := server_options.llama_server) else None,
            "llama_slots": server_options.llama_slots,
            "sizes": list(sizes),
            "repeats": repeats,
            "editor_every_s": args.editor_every,
        }
        document = prompt_document(summaries, result.runs, run_settings, base=LLAMA_SERVER)
        write_file(args.json, json.dumps(document, indent=1))
    return 0 if any(run.name == LOCALSPEC for run in result.runs) else 1


def _run(
    settings: RuntimeSettings,
    server_options: EditorOptions,
    options: PromptSpeedOptions,
    completions: list[dict[str, Any]],
) -> PromptSpeedResult:
    """Each repeat on servers started for it alone (`localspec.bench.prompt_speed` says
    why): the luck of one process's memory placement falls on one repeat, not on all."""
    progress = Progress(sys.stderr)
    result = PromptSpeedResult()
    phases = 1 + (options.editor_every_s is not None)
    text = source_text()
    cases: list[PromptCase] = []

    def done(run: PromptRun) -> None:
        speed = run.size / run.seconds if run.seconds > 0 else 0.0
        progress.run_done(f"{run.size} tokens {run.phase} #{run.repeat + 1}", run.name, speed)

    for repeat in range(options.repeats):
        with running_servers(settings, server_options, progress.note) as (servers, skipped):
            if repeat == 0:  # every repeat's prompts, tokenized once by the first server
                progress.start(len(servers) * len(options.sizes) * options.repeats * phases)
                cases = prompt_cases(servers[0], text, options)
            mine = [case for case in cases if case.repeat == repeat]
            one = run_prompt_speed(servers, text, completions, options, done, cases=mine)
        result.runs += one.runs
        result.skipped += [s for s in skipped + one.skipped if s not in result.skipped]
    progress.finish()
    return result
