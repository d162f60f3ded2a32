"""`localspec complete`: one prompt in (stdin first, then arguments), the answer out on stdout.

A running `localspec serve` on the default socket answers without loading any model; otherwise
the models load in this process. `--server` names a server: localspec's, llama-server or any
OpenAI-compatible endpoint (`complete_remote`). Both paths yield the same events, so every
output option (`--no-stream`, `-x`, `--json`, `--stats`) behaves the same either way. Only the
answer goes to stdout; notices and statistics go to stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from localspec.cli.apply import added_files, apply_answer, edit_constraint, wants_edits
from localspec.cli.arguments import given
from localspec.cli.complete_remote import via_server
from localspec.cli.constraint_args import read_constraint
from localspec.cli.notice import notice
from localspec.cli.outcome import Outcome
from localspec.cli.server_choice import choose_server
from localspec.client import ServerFailedError
from localspec.context_files import load_file, read_at_most, read_bytes_at_most, render_files
from localspec.edits.grammar import EDIT_ANSWER_TOKENS
from localspec.edits.prompt import system_message
from localspec.errors import UsageError

_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def text_of(value: str, what: str) -> str:
    """`value`, refused if it is not valid UTF-8: bytes that are not (from a file or an
    argument) reach Python as lone surrogates, which no tokenizer or JSON body can carry."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{what} is not valid UTF-8 (at character {exc.start}): convert it first, "
            f"e.g. with iconv"
        ) from exc
    return value


def read_prompt(args: argparse.Namespace) -> str:
    """Piped stdin first, then the arguments, as `llm` does."""
    parts = []
    if not sys.stdin.isatty():
        raw = read_at_most(sys.stdin.buffer, "the text on stdin")
        piped = raw.decode("utf-8", errors="surrogateescape")
        if piped:
            parts.append(text_of(piped, "the text on stdin"))
    if args.prompt:
        parts.append(text_of(" ".join(args.prompt), "the prompt"))
    if not parts:
        raise UsageError("no prompt: pass it as an argument or pipe it on stdin")
    return "\n".join(parts)


def with_files(args: argparse.Namespace, prompt: str, fim: bool) -> str:
    """The prompt with the `--file`s: before the prompt text with --raw; for a chat prompt,
    `args.system` becomes the chat app's system message for the same files (`system_message`:
    with --apply or --dry-run, the edit format too)."""
    if fim:
        if args.file:
            raise UsageError("--file applies to chat and --raw prompts, not to --fim")
        if args.edit_grammar:
            raise UsageError("--edit-grammar applies to chat prompts, not to --fim")
        return prompt
    files = [load_file(path) for path in args.file or []]
    if args.edit_grammar:
        args.constraint = edit_constraint(args, files)
    if args.raw:
        return f"{render_files(files)}\n\n{prompt}" if files else prompt
    args.system = system_message(args.system or "", files, edits=wants_edits(args))
    return prompt


def read_suffix(args: argparse.Namespace) -> str | None:
    """The text after the gap for --fim (None without --fim)."""
    if args.suffix is not None and args.suffix_file is not None:
        raise UsageError("give the suffix once: --suffix or --suffix-file")
    if not args.fim:
        if args.suffix is not None or args.suffix_file is not None:
            raise UsageError("--suffix and --suffix-file need --fim")
        return None
    if args.suffix_file is not None:
        try:
            raw = read_bytes_at_most(Path(args.suffix_file), f"--suffix-file {args.suffix_file}")
        except OSError as exc:
            raise UsageError(
                f"cannot read --suffix-file {args.suffix_file}: {exc.strerror}"
            ) from exc
        suffix = raw.decode("utf-8", errors="surrogateescape")
        return text_of(suffix, f"--suffix-file {args.suffix_file}")
    return text_of(args.suffix or "", "--suffix")


def extract_code(text: str) -> str:
    """The first fenced code block's content; the whole text when there is none (as `llm -x`)."""
    match = _FENCED.search(text)
    return match.group(1) if match else text


def in_process(
    args: argparse.Namespace, prompt: str, suffix: str | None
) -> Iterator[str | Outcome]:
    """Load the models here (imported only now: the server path never needs llama.cpp)."""
    from localspec.cli.complete_local import generate  # noqa: PLC0415

    return generate(args, prompt, suffix)


def edit_answer_length(args: argparse.Namespace) -> None:
    """With --apply or --dry-run and no --max-tokens, the answer may be as long as the chat's:
    a small file comes back whole (`edits.prompt`), which 256 tokens would cut."""
    if wants_edits(args) and "max_tokens" not in given(args):
        args.max_tokens = EDIT_ANSWER_TOKENS


def run(args: argparse.Namespace) -> int:
    if args.max_tokens < 1:  # checked before anything loads or connects
        raise UsageError("--max-tokens must be at least 1")
    edit_answer_length(args)
    prompt = read_prompt(args)
    suffix = read_suffix(args)
    args.constraint = read_constraint(args)
    if args.system and (args.raw or suffix is not None):
        raise UsageError("--system applies to chat prompts, not to --raw or --fim")
    prompt = with_files(args, prompt, fim=suffix is not None)
    server = choose_server(args, notice)
    if server is not None and args.edit_grammar:
        raise UsageError("--edit-grammar runs the models in this process: add --no-server")
    events = (
        in_process(args, prompt, suffix)
        if server is None
        else via_server(server, args, prompt, suffix)
    )
    streaming = not (args.no_stream or args.json or args.extract)
    parts: list[str] = []
    outcome: Outcome | None = None
    for item in events:
        if isinstance(item, Outcome):
            outcome = item
            continue
        parts.append(item)
        if streaming:
            sys.stdout.write(item)
            sys.stdout.flush()
    if outcome is None:
        raise ServerFailedError("the generation ended without a result")
    text = "".join(parts)
    if args.extract:
        text = extract_code(text)
    if args.json:
        record = {"text": text, "finish_reason": outcome.finish_reason, "stats": outcome.stats}
        sys.stdout.write(json.dumps(record) + "\n")
    elif streaming:
        sys.stdout.write("" if text.endswith("\n") else "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    if args.stats:
        print(json.dumps(outcome.stats), file=sys.stderr)
    if wants_edits(args):
        return apply_answer("".join(parts), args.dry_run, added_files(args))
    return 0
