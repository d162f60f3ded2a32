"""`localspec complete --apply` and `--dry-run`: the answer's edits, applied to the files.

The answer still goes to stdout, as without these options; the diff goes to stderr with the
notices. So stdout stays exactly the answer for every output option (a pipe, `-x` and `--json`
see what they saw before), and the diff, a report of what happened to the files, reaches the
terminal even when stdout is piped away. Paths are relative to the working folder, which an
edit may not leave. A block that does not apply prints one error line per failing block, exits
1, and nothing is written.

A block read leniently (`localspec.edits.lenient`: a placeholder path, a SEARCH without its
indentation...) is applied only once the user has read what was assumed: the readings are
printed with the diff, and `--apply` asks on a terminal before writing; with no terminal to
ask on, nothing is written and the diff stays on stderr for `git apply`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from localspec.cli.notice import notice
from localspec.constraints import Constraint
from localspec.context_files import ContextFile
from localspec.edits import (
    EditError,
    FileChange,
    parse_edits,
    plan_changes,
    unified_diff,
    write_changes,
)
from localspec.edits.grammar import edit_grammar, editable_files
from localspec.errors import UsageError

_COLOURS = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}
_RESET = "\033[0m"


def wants_edits(args: argparse.Namespace) -> bool:
    return bool(args.apply or args.dry_run)


def edit_constraint(args: argparse.Namespace, files: Sequence[ContextFile]) -> Constraint:
    """`--edit-grammar`'s constraint for the `--file`s: refused, saying why, where it cannot
    apply (no edits asked for, no file with lines, another constraint, a raw prompt)."""
    if not wants_edits(args) or args.raw:
        raise UsageError("--edit-grammar applies to --apply and --dry-run on a chat prompt")
    if args.constraint is not None:
        raise UsageError("give one constraint: --edit-grammar, --json-schema or --grammar")
    if not editable_files(files):
        raise UsageError("--edit-grammar needs a --file with lines to edit")
    return Constraint.lark(edit_grammar(files))


def added_files(args: argparse.Namespace) -> list[str]:
    """The files given with `--file`: the model saw them whole, so a whole-file block for one
    of them is an edit too."""
    return [str(path) for path in args.file or []]


def apply_answer(
    answer: str,
    dry_run: bool,
    added: Sequence[str] = (),
    root: Path | None = None,
    out: TextIO | None = None,
    *,
    confirm: Callable[[str], bool] | None = None,
) -> int:
    """Apply (or with `dry_run` only show) the edits in `answer` to the files under `root`
    (the working folder); the exit status: 0 done, 1 when nothing could be applied. Edits
    read leniently are written only when `confirm` (by default a question on the terminal)
    says yes to what was assumed."""
    out = out or sys.stderr
    try:
        edits = parse_edits(answer, added)
        if not edits:
            raise EditError(
                [
                    "the answer has no edits (SEARCH/REPLACE blocks, or a --file rewritten "
                    "whole under its path), so nothing was applied: ask for the change again "
                    "(--apply's system message says how to write one), or add --edit-grammar"
                ]
            )
        changes = plan_changes(edits, root or Path.cwd(), added)
        out.write(_coloured(unified_diff(changes), out))
        assumed = [line for change in changes for line in change.assumed]
        for line in assumed:
            print(f"localspec: assumed: {line}", file=out)
        if not dry_run:
            if assumed and not (confirm or _ask)("write these edits, read as assumed above?"):
                raise EditError(
                    [
                        "the edits were read leniently and not confirmed: check the readings "
                        "above, then apply the diff with `git apply`, or run again on a "
                        "terminal to be asked"
                    ]
                )
            write_changes(changes)
    except EditError as exc:
        for problem in exc.problems:
            print(f"localspec: error: {problem}", file=out)
        print("localspec: nothing was written", file=out)
        return exc.exit_code
    notice(_summary(changes, len(edits), dry_run))
    return 0


def _ask(question: str) -> bool:
    """Yes or no from the terminal, asked on stderr (stdout is the answer's); no when there
    is no terminal to ask on (stdin piped)."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"localspec: {question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _summary(changes: Sequence[FileChange], blocks: int, dry_run: bool) -> str:
    if not changes:
        return f"the {blocks} edit(s) leave every file as it is: nothing to write"
    names = ", ".join(change.path for change in changes)
    if dry_run:
        return f"dry run: {blocks} edit(s) would change {names}; nothing was written"
    return f"applied {blocks} edit(s) to {names}"


def _coloured(diff: str, out: TextIO) -> str:
    """The diff in git's colours on a terminal (unless NO_COLOR is set), plain otherwise."""
    if not out.isatty() or os.environ.get("NO_COLOR"):
        return diff
    lines = diff.splitlines(keepends=True)
    return "".join(_paint(line) for line in lines)


def _paint(line: str) -> str:
    text = line.removesuffix("\n")
    if line.startswith(("---", "+++")):
        return f"\033[1m{text}{_RESET}\n"
    colour = _COLOURS.get(line[:1])
    return line if colour is None else f"{colour}{text}{_RESET}\n"
