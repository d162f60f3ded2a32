"""The `localspec` command: parses arguments, calls the runtime, turns errors into exit codes.

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted. User errors print
one line on stderr; `--verbose` adds llama.cpp's log and tracebacks.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from localspec import __version__
from localspec.errors import LocalspecError, UsageError
from localspec.models import DEFAULT_DRAFT, DEFAULT_TARGET, resolve_model
from localspec.runtime import Message, Runtime, RuntimeSettings
from localspec.spec.engine import Finished, GenerationRequest, SpecMode, SpecSettings, TextChunk
from localspec.spec.sampling import SamplingSettings


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and hardware")
    group.add_argument(
        "--target",
        default=DEFAULT_TARGET,
        help="target model: GGUF path or owner/repo/file.gguf[@rev] (default: Qwen2.5-Coder-1.5B)",
    )
    group.add_argument(
        "--draft",
        default=DEFAULT_DRAFT,
        help="draft model of the same family, loaded only for --spec draft/hybrid "
        "(default: Qwen2.5-Coder-0.5B)",
    )
    group.add_argument("--ctx-size", type=int, default=4096, help="context window in tokens")
    group.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    group.add_argument("--gpu-layers", type=int, default=-1, help="target layers on GPU (-1: all)")
    group.add_argument("--draft-gpu-layers", type=int, default=-1, help="draft layers on GPU")
    group.add_argument(
        "--mmap",
        action="store_true",
        help="memory-map model files: faster start, but repacked CPU weights stay resident twice",
    )


def _add_generation_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("generation")
    group.add_argument("--max-tokens", type=int, default=256)
    group.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--min-p", type=float, default=0.0)
    group.add_argument("--repeat-penalty", type=float, default=1.0)
    group.add_argument("--seed", type=int)
    group.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    spec = parser.add_argument_group("speculation")
    spec.add_argument(
        "--spec",
        choices=[m.value for m in SpecMode],
        default=SpecMode.NGRAM.value,
        help="proposer: off, ngram (default: free, pays on edits), draft (the draft model) or "
        "hybrid (n-gram when it matches, else the draft model)",
    )
    defaults = SpecSettings()
    spec.add_argument(
        "--draft-max", type=int, default=defaults.draft_max, help="longest draft-model draft"
    )
    spec.add_argument(
        "--p-min",
        type=float,
        default=defaults.p_min,
        help="the draft model stops before a token it gives less probability than this",
    )
    spec.add_argument(
        "--ngram-max", type=int, default=defaults.ngram_draft_max, help="longest n-gram draft"
    )
    spec.add_argument(
        "--ngram-min-match",
        type=int,
        default=defaults.ngram_min_match,
        help="draft from a lookup only after a match of at least this many tokens",
    )


def _runtime_settings(args: argparse.Namespace, spec: SpecSettings) -> RuntimeSettings:
    return RuntimeSettings(
        target=resolve_model(args.target),
        draft=resolve_model(args.draft) if spec.uses_draft_model else None,
        n_ctx=args.ctx_size,
        n_threads=args.threads,
        target_gpu_layers=args.gpu_layers,
        draft_gpu_layers=args.draft_gpu_layers,
        use_mmap=args.mmap,
    )


def _spec_settings(args: argparse.Namespace) -> SpecSettings:
    return SpecSettings(
        mode=SpecMode(args.spec),
        draft_max=args.draft_max,
        ngram_draft_max=args.ngram_max,
        ngram_min_match=args.ngram_min_match,
        p_min=args.p_min,
    )


def _sampling_settings(args: argparse.Namespace) -> SamplingSettings:
    return SamplingSettings(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
    )


def _read_prompt(args: argparse.Namespace) -> str:
    """Piped stdin first, then the arguments, as `llm` does."""
    parts = []
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        if piped:
            parts.append(piped)
    if args.prompt:
        parts.append(" ".join(args.prompt))
    if not parts:
        raise UsageError("no prompt: pass it as an argument or pipe it on stdin")
    return "\n".join(parts)


def _complete(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args)
    spec = _spec_settings(args)
    sampling = _sampling_settings(args)
    with Runtime(_runtime_settings(args, spec)) as runtime:
        if args.raw:
            tokens = runtime.tokenize(prompt)
        else:
            messages = [Message("system", args.system)] if args.system else []
            tokens = runtime.chat_prompt([*messages, Message("user", prompt)])
        request = GenerationRequest(
            prompt=tokens,
            max_tokens=args.max_tokens,
            sampling=sampling,
            spec=spec,
            stop=tuple(args.stop),
        )
        for event in runtime.generate(request):
            if isinstance(event, TextChunk):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                if not event.text.endswith("\n"):
                    sys.stdout.write("\n")
                sys.stdout.flush()
                if args.stats:
                    print(json.dumps(event.stats.to_dict()), file=sys.stderr)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from localspec.bench import run_bench  # noqa: PLC0415 - keep start-up of other commands fast

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localspec",
        description="Local coding-assistant runtime with exact speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    commands = parser.add_subparsers(dest="command", required=True)

    complete = commands.add_parser("complete", help="one-shot generation (stdin + arguments)")
    complete.add_argument("prompt", nargs="*", help="prompt text (appended to piped stdin)")
    complete.add_argument("-s", "--system", help="system prompt")
    complete.add_argument(
        "--raw", action="store_true", help="send the prompt without chat template"
    )
    complete.add_argument("--stats", action="store_true", help="statistics as JSON on stderr")
    _add_model_options(complete)
    _add_generation_options(complete)
    complete.set_defaults(handler=_complete)

    bench = commands.add_parser("bench", help="plain vs. speculative, side by side")
    _add_model_options(bench)
    bench.add_argument("--workloads", type=Path, help="JSONL of prompts (default: shipped set)")
    bench.add_argument(
        "--modes",
        default="off,ngram,draft:2,draft:4,hybrid",
        help="comma-separated modes; draft:K and hybrid:K set the draft length",
    )
    bench.add_argument("--max-tokens", type=int, default=128)
    bench.add_argument("--repeats", type=int, default=2)
    bench.add_argument("--category", action="append", help="only these workload categories")
    bench.add_argument("--json", type=Path, help="write the full results here")
    bench.set_defaults(handler=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
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
