"""`localspec bench editor`: llama.vim's request pattern against localspec and llama-server.

Turns the options into a session (`localspec.bench.editor_session`), starts the servers and
replays it (`localspec.bench.editor`), prints the report on stdout (progress on stderr) and
writes `--json`. `--numerics` then loads the pair in this process and compares shifted KV
reuse with cold prefills on the replay's completion prompts (`localspec.bench.reuse_numerics`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from localspec.bench.editor import (
    CACHE_REUSE,
    EditorOptions,
    EditorResult,
    fim_prompts,
    replay,
    running_servers,
)
from localspec.bench.editor_report import editor_document, format_editor_report, summarise
from localspec.bench.editor_session import SourceFile, editor_session, shipped_files
from localspec.bench.llama_vim import WARMUP, EditorRequest
from localspec.bench.progress import Progress
from localspec.bench.reuse_numerics import measure_reuse_numerics
from localspec.cli.arguments import FIM_REQUESTS
from localspec.cli.bench_files import check_writable, model_settings, on_path, write_file
from localspec.cli.options import runtime_settings
from localspec.context_files import read_text_file
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime
from localspec.speculative.settings import SpecMode

EDITOR_CTX_SIZE = 16384
"""Room for llama.vim's 256 + 64 lines and 16 ring chunks of 33 lines (~8k tokens of code)."""


def serve_spec(args: argparse.Namespace, bench: str = "editor") -> SpecMode:
    """`--modes` as `localspec serve`'s --spec (default auto)."""
    name = args.modes or "auto"
    try:
        return SpecMode(name)
    except ValueError:
        modes = ", ".join(mode.value for mode in SpecMode)
        raise UsageError(
            f"--modes of `bench {bench}` is localspec's --spec: one of {modes}"
        ) from None


def session_files(path: Path | None) -> list[SourceFile]:
    """The shipped files (difflib.py edited, heapq.py visited), or `--editor-file` alone."""
    if path is None:
        return shipped_files()
    return [SourceFile(path.name, read_text_file(path, f"--editor-file {path}"))]


def editor_bench_command(args: argparse.Namespace) -> int:
    check_writable(args.json, args.watch)
    spec = serve_spec(args)
    files = session_files(args.editor_file)
    if args.ctx_size is None:
        args.ctx_size = EDITOR_CTX_SIZE
    need_draft = None if spec is SpecMode.AUTO else spec in (SpecMode.DRAFT, SpecMode.HYBRID)
    settings = runtime_settings(args, need_draft, ngram_cache=False)
    fim_requests = args.fim_requests or FIM_REQUESTS
    requests = editor_session(files, fim_requests=fim_requests, seed=args.session_seed)
    options = EditorOptions(
        spec=spec.value,
        t_max_prompt=args.t_max_prompt_ms,
        llama_server=args.llama_server or on_path("llama-server"),
        watch=args.watch,
    )
    progress = Progress(sys.stderr)
    result = _run(requests, settings, options, progress)
    summary = summarise(result)
    print(format_editor_report(result, summary, heading=_heading(files[0], args, requests)))
    numerics = _numerics(settings, requests) if args.numerics else None
    if args.json:
        run_settings: dict[str, Any] = {
            **model_settings(settings),
            "threads": settings.n_threads,
            "spec": spec.value,
            "llama_server": str(options.llama_server) if options.llama_server else None,
            "cache_reuse": CACHE_REUSE,
            "file": files[0].name,
            "session_seed": args.session_seed,
            "fim_requests": fim_requests,
            "t_max_prompt_ms": options.t_max_prompt,
        }
        doc = editor_document(result, summary, run_settings)
        doc["numerics"] = numerics
        write_file(args.json, json.dumps(doc, indent=1))
    return 0


def _run(
    requests: list[EditorRequest],
    settings: RuntimeSettings,
    options: EditorOptions,
    progress: Progress,
) -> EditorResult:
    with running_servers(settings, options, progress.note) as (servers, skipped):
        progress.start(len(requests) * len(servers))
        result = replay(
            requests,
            servers,
            options,
            lambda index, request, name, reply: progress.run_done(
                f"{index} {request.kind}", name, reply.prompt_n / max(reply.seconds, 1e-9)
            ),
        )
    progress.finish()
    result.skipped[:0] = skipped
    return result


def _heading(source: SourceFile, args: argparse.Namespace, requests: list[EditorRequest]) -> str:
    warmups = sum(request.kind == WARMUP for request in requests)
    work = (
        "llama.vim's t_max_prompt_ms sent (the servers may do different work)"
        if args.t_max_prompt_ms
        else "t_max_prompt_ms left out (equal work)"
    )
    return (
        f"llama.vim replay over {source.name} (seed {args.session_seed}): "
        f"{len(requests) - warmups} completions, {warmups} warm-ups; {work}"
    )


def _numerics(settings: RuntimeSettings, requests: list[EditorRequest]) -> dict[str, Any]:
    """Shifted reuse against cold prefills on the completions' prompts, with the warm-ups
    between them processed as the server processes them; prints the table."""
    with Runtime(settings) as runtime:
        warm_ups = {i for i, request in enumerate(requests) if request.kind == WARMUP}
        numerics = measure_reuse_numerics(
            runtime, fim_prompts(runtime, requests), cache_reuse=CACHE_REUSE, warm_ups=warm_ups
        )
    rows = numerics.rows()
    width = max(len(what) for what, _ in rows)
    print()
    print(f"shifted KV reuse (chunks of {CACHE_REUSE}+) against cold prefills, completions:")
    for what, figure in rows:
        print(f"  {what:<{width}}  {figure}")
    return asdict(numerics)
