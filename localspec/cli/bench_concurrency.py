"""`localspec bench concurrency`: the editor's completions during a streaming chat answer,
against `localspec serve` and llama-server -np 3, side by side (`localspec.bench.concurrency`).

The completions are the first `--fim-requests` of the editor bench's session (its
`--editor-file` and `--session-seed`); the servers start as the editor bench starts them,
localspec with `--parallel N` only when given. The table goes to stdout, progress to stderr,
`--json` to a file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from localspec.bench.concurrency import (
    DEFAULT_REPEATS,
    LLAMA_SLOTS,
    QUESTION,
    ConcurrencyOptions,
    ConcurrencyResult,
    run_concurrency,
)
from localspec.bench.concurrency_report import (
    concurrency_document,
    format_concurrency_report,
    summarise,
)
from localspec.bench.editor import LOCALSPEC, EditorOptions, running_servers
from localspec.bench.editor_session import editor_session
from localspec.bench.llama_vim import WARMUP, EditorRequest
from localspec.bench.progress import Progress
from localspec.cli.bench_editor import EDITOR_CTX_SIZE, serve_spec, session_files
from localspec.cli.bench_files import check_writable, model_settings, on_path, write_file
from localspec.cli.options import runtime_settings
from localspec.context_files import read_text_file
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.speculative.settings import SpecMode


def concurrency_bench_command(args: argparse.Namespace) -> int:
    repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    if repeats < 1 or not args.delay >= 0:
        raise UsageError("--repeats must be at least 1 and --delay at least 0")
    if args.compare_prompt_hold is not None and args.parallel == 1:
        raise UsageError(
            "--compare-prompt-hold needs --parallel 2 or more: with one slot nothing stops a "
            "prompt for an editor"
        )
    check_writable(args.json, args.watch)
    spec = serve_spec(args, "concurrency")
    files = session_files(args.editor_file)
    if args.ctx_size is None:
        args.ctx_size = EDITOR_CTX_SIZE
    need_draft = None if spec is SpecMode.AUTO else spec in (SpecMode.DRAFT, SpecMode.HYBRID)
    settings = runtime_settings(args, need_draft, ngram_cache=False)
    session = editor_session(files, fim_requests=args.fim_requests, seed=args.session_seed)
    requests = [request for request in session if request.kind != WARMUP]
    server_options = EditorOptions(
        spec=spec.value,
        llama_server=args.llama_server or on_path("llama-server"),
        llama_slots=LLAMA_SLOTS,
        parallel=args.parallel,
        watch=args.watch,
        compare_ubatch=args.compare_ubatch,
        compare_prompt_hold=args.compare_prompt_hold,
    )
    context = read_text_file(args.chat_context) if args.chat_context else ""
    if args.chat_context and not context.strip():
        raise UsageError(f"--chat-context {args.chat_context} is empty")
    options = ConcurrencyOptions(args.chat_tokens, args.delay, repeats, context)
    result = _run(requests, settings, server_options, options, Progress(sys.stderr))
    summary = summarise(result)
    into = "sending the request for" if context else "the first token of"
    carrying = f" carrying {args.chat_context.name}" if context else ""
    heading = (
        f"{len(requests)} llama.vim completions over {files[0].name} (seed {args.session_seed}) "
        f"alone and from {options.delay_s:g} s after {into} a streaming chat answer{carrying} "
        f"of at most {options.chat_tokens} tokens; medians over {repeats} repeat(s) (min-max)"
    )
    print(format_concurrency_report(result, summary, heading=heading))
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "threads": settings.n_threads,
            "spec": spec.value,
            "parallel": args.parallel,
            "llama_server": str(llama) if (llama := server_options.llama_server) else None,
            "llama_slots": LLAMA_SLOTS,
            "file": files[0].name,
            "session_seed": args.session_seed,
            "fim_requests": len(requests),
            "chat_question": QUESTION,
            "chat_tokens": options.chat_tokens,
            "delay_s": options.delay_s,
            "context": str(args.chat_context) if context else None,
            "ubatch": settings.ubatch,
            "compare_ubatch": args.compare_ubatch,
            "compare_prompt_hold": args.compare_prompt_hold,
            "repeats": repeats,
        }
        doc = concurrency_document(result, summary, run_settings)
        write_file(args.json, json.dumps(doc, indent=1))
    return 0 if LOCALSPEC in summary else 1  # localspec failed midway: nothing was compared


def _run(
    requests: list[EditorRequest],
    settings: RuntimeSettings,
    server_options: EditorOptions,
    options: ConcurrencyOptions,
    progress: Progress,
) -> ConcurrencyResult:
    with running_servers(settings, server_options, progress.note) as (servers, skipped):
        progress.start(len(servers) * (1 + 3 * options.repeats))
        result = run_concurrency(
            servers,
            requests,
            options,
            lambda what, name, speed: progress.run_done(
                what, name, 0.0 if math.isnan(speed) else speed
            ),
        )
    progress.finish()
    result.skipped[:0] = skipped
    return result
