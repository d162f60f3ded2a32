"""Applying parsed edits to the files as they are now, in memory: what each file becomes, and
its unified diff. Nothing here writes (see `write`): every block is checked first, so that one
block that does not apply leaves every file untouched.

A SEARCH text must match the file exactly, as whole lines; the one difference allowed is the
file's missing final newline. Blocks for the same file apply in order, each to the result of
the ones before it, and a SEARCH that occurs twice changes the first occurrence (aider's rule,
which the models were taught). Lines are matched with `\n` endings, and each keeps its own
ending: a line no block replaces is written back byte for byte, and the lines a block puts in
end as most of the lines they replace do (as most of the file's do, when they replace none), so
a file with Windows line endings keeps them, and one with mixed endings keeps its mix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.edits import fs
from localspec.edits.mismatch import closest
from localspec.edits.parse import Edit
from localspec.edits.paths import resolve, shown
from localspec.errors import EditError

__all__ = ["FileChange", "closest", "plan_changes", "resolve", "unified_diff"]


@dataclass(frozen=True)
class FileChange:
    """What one file becomes. `path` is the name shown to the user, `target` the file written
    (links followed); `before` None: the file does not exist yet; `after` None: it is removed
    (undoing the creation of a file)."""

    path: str
    target: Path
    before: str | None
    after: str | None

    def diff(self) -> str:
        """The change as a unified diff (`git apply` reads it), with `\n` line endings."""
        old = _lines(self.before)
        new = _lines(self.after)
        lines = difflib.unified_diff(
            old,
            new,
            "/dev/null" if self.before is None else f"a/{self.path}",
            "/dev/null" if self.after is None else f"b/{self.path}",
        )
        return "".join(_ended(lines))


def unified_diff(changes: Iterable[FileChange]) -> str:
    return "".join(change.diff() for change in changes)


def plan_changes(edits: Sequence[Edit], root: Path) -> list[FileChange]:
    """The files `edits` change (paths relative to `root`, which they may not leave) and what
    each becomes; files the edits leave as they are are left out. Raises `EditError` with one
    line per block that does not apply."""
    files: dict[Path, _File] = {}
    edited: set[Path] = set()  # files an earlier block changed: line numbers are after it
    problems: list[str] = []
    for number, edit in enumerate(edits, 1):
        where = f"block {number} ({edit.kind} for {shown(edit.path)}, answer line {edit.line})"
        target = None
        try:
            target = resolve(root, edit.path)
            file = files.get(target) or _File.read(edit.path, target)
            files[target] = file
            file.apply(edit)
            edited.add(target)
        except EditError as exc:
            after = " (in the file as the blocks before this one leave it)"
            note = after if target in edited else ""
            problems.extend(f"{where}: {problem}{note}" for problem in exc.problems)
    if problems:
        raise EditError(problems)
    return [file.change() for file in files.values() if file.original != file.after()]


@dataclass
class _File:
    """A file while its blocks apply: its text as read (`original`), as edited so far (`text`,
    with `\n` endings), and whether each of its lines ends with `\r\n` (`crlf`, one flag per
    `\n` in `text`)."""

    path: str
    target: Path
    original: str | None
    text: str | None
    crlf: list[bool] = field(default_factory=list)

    @classmethod
    def read(cls, path: str, target: Path) -> _File:
        try:
            data = fs.read_file(target, shown(path))
        except OSError as exc:
            raise EditError([f"cannot read {shown(path)}: {exc.strerror or exc}"]) from exc
        if data is None:
            return cls(path, target, None, None)
        try:
            original = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EditError([f"{shown(path)} is not UTF-8 text: edit it by hand"]) from exc
        lines = original.split("\n")
        crlf = [line.endswith("\r") for line in lines[:-1]]
        return cls(path, target, original, original.replace("\r\n", "\n"), crlf)

    def apply(self, edit: Edit) -> None:
        """Make `edit`: the lines it puts in take the endings of the lines they replace."""
        at, end, new = _splice(edit, self.text)
        text = self.text or ""
        line = text.count("\n", 0, at)
        replaced = self.crlf[line : line + text.count("\n", at, end)]
        ending = _most_crlf(replaced, self.crlf)
        self.crlf[line : line + len(replaced)] = [ending] * new.count("\n")
        self.text = text[:at] + new + text[end:]
        if len(self.text) > fs.MAX_BYTES:
            big = f"the edit makes {shown(self.path)} over {fs.limit()}"
            raise EditError([f"{big}: edit it by hand"])

    def after(self) -> str | None:
        if self.text is None or not any(self.crlf):
            return self.text
        lines = self.text.split("\n")
        ended = (
            line + ("\r\n" if crlf else "\n")
            for line, crlf in zip(lines[:-1], self.crlf, strict=True)
        )
        return "".join(ended) + lines[-1]

    def change(self) -> FileChange:
        return FileChange(self.path, self.target, self.original, self.after())


def _most_crlf(replaced: Sequence[bool], whole: Sequence[bool]) -> bool:
    """Whether new lines end with `\r\n`: when most of the lines they replace do, or, when
    those are as many one way as the other (or none), most of the file's."""
    for flags in (replaced, whole):
        if 2 * sum(flags) != len(flags):
            return 2 * sum(flags) > len(flags)
    return False


def _splice(edit: Edit, text: str | None) -> tuple[int, int, str]:
    """Where `edit` goes in `text` (None: no such file): the span of it that is replaced, and
    what is put there."""
    if edit.search is None:
        return 0, len(text or ""), edit.replace
    if edit.search == "":
        if text is not None and text.strip():
            raise EditError(
                [
                    f"an empty SEARCH creates a file, but {shown(edit.path)} exists: SEARCH must "
                    f"hold the lines to replace"
                ]
            )
        return 0, len(text or ""), edit.replace
    if text is None:
        raise EditError(
            [
                f"{shown(edit.path)} does not exist: check the path, or give an empty SEARCH to "
                f"create it"
            ]
        )
    at = _find_lines(text, edit.search)
    if at is not None:
        return at, at + len(edit.search), edit.replace
    unended = edit.search.removesuffix("\n")
    start = len(text) - len(unended)
    if not text.endswith("\n") and _at_line_start(text, start, unended):
        # the file's last line has no newline: neither does the replacement's
        return start, len(text), edit.replace.removesuffix("\n")
    raise EditError(
        [f"the SEARCH text is not in {shown(edit.path)} exactly; {closest(edit, text)}"]
    )


def _find_lines(text: str, search: str) -> int | None:
    """Where `search` first occurs in `text` starting a line, or None: one search, linear
    whatever the text (not one per occurrence that does not start a line)."""
    if text.startswith(search):
        return 0
    at = text.find("\n" + search)
    return None if at == -1 else at + 1


def _at_line_start(text: str, at: int, search: str) -> bool:
    return at >= 0 and text.startswith(search, at) and (at == 0 or text[at - 1] == "\n")


def _lines(text: str | None) -> list[str]:
    return [] if text is None else text.replace("\r\n", "\n").splitlines(keepends=True)


def _ended(lines: Iterable[str]) -> Iterable[str]:
    """Diff lines, each ending in a newline; a file's last line without one is marked the way
    diff(1) does."""
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n\\ No newline at end of file\n"
