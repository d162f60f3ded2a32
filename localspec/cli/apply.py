"""`localspec complete --apply` and `--dry-run`: the answer's edits, applied to the files.

The answer still goes to stdout, as without these options; the diff goes to stderr with the
notices. So stdout stays exactly the answer for every output option (a pipe, `-x` and `--json`
see what they saw before), and the diff, a report of what happened to the files, reaches the
terminal even when stdout is piped away. Paths are relative to the working folder, which an
edit may not leave. A block that does not apply prints one error line per failing block, exits
1, and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from localspec.cli.notice import notice
from localspec.edits import (
    INSTRUCTIONS,
    EditError,
    FileChange,
    parse_edits,
    plan_changes,
    unified_diff,
    write_changes,
)

_COLOURS = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}
_RESET = "\033[0m"


def wants_edits(args: argparse.Namespace) -> bool:
    return bool(args.apply or args.dry_run)


def ask_for_edits(args: argparse.Namespace, fim: bool) -> None:
    """Without a system prompt of the user's, ask the model for SEARCH/REPLACE blocks: a
    model left to itself answers with whole files or prose that no one can apply."""
    if wants_edits(args) and not args.system and not args.raw and not fim:
        args.system = INSTRUCTIONS


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
) -> int:
    """Apply (or with `dry_run` only show) the edits in `answer` to the files under `root`
    (the working folder); the exit status: 0 done, 1 when nothing could be applied."""
    out = out or sys.stderr
    try:
        edits = parse_edits(answer, added)
        if not edits:
            raise EditError(
                [
                    "the answer has no SEARCH/REPLACE blocks, so nothing was applied: ask for "
                    "the change as SEARCH/REPLACE blocks (the default --system asks for them)"
                ]
            )
        changes = plan_changes(edits, root or Path.cwd())
        out.write(_coloured(unified_diff(changes), out))
        if not dry_run:
            write_changes(changes)
    except EditError as exc:
        for problem in exc.problems:
            print(f"localspec: error: {problem}", file=out)
        print("localspec: nothing was written", file=out)
        return exc.exit_code
    notice(_summary(changes, len(edits), dry_run))
    return 0


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
