"""`localspec complete`: one prompt in (stdin first, then arguments), the answer streamed out."""

from __future__ import annotations

import argparse
import json
import sys

from localspec.cli.options import draft_need, runtime_settings, sampling_settings, spec_settings
from localspec.errors import UsageError
from localspec.runtime import Message, Runtime
from localspec.spec.engine import Finished, GenerationRequest, TextChunk


def read_prompt(args: argparse.Namespace) -> str:
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


def notice(message: str) -> None:
    """One-time work the user waits for (calibration) is announced on stderr."""
    print(f"localspec: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    prompt = read_prompt(args)
    spec = spec_settings(args)
    sampling = sampling_settings(args)
    with Runtime(runtime_settings(args, draft_need(spec)), notice) as runtime:
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
