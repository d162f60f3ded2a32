"""Applying parsed edits to the files as they are now, in memory: what each file becomes, and
its unified diff. Nothing here writes (see `write`): every block is checked first, so that one
block that does not apply leaves every file untouched.

A SEARCH text must match the file exactly, as whole lines; the one difference allowed is the
file's missing final newline. Blocks for the same file apply in order, each to the result of
the ones before it, and a SEARCH that occurs twice changes the first occurrence (aider's rule,
which the models were taught). Where that finds nothing, the unambiguous lenient readings of
`lenient` are tried (a path that names no file read as the one file of the context it must
mean, a SEARCH matched but for its indentation), and each is kept with the file's change as a
sentence, for the user to read before anything is written. Lines are matched with `\n`
endings, and each keeps its own ending: a line no block replaces is written back byte for
byte, and the lines a block puts in end as most of the lines they replace do (as most of the
file's do, when they replace none), so a file with Windows line endings keeps them, and one
with mixed endings keeps its mix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from localspec.edits import fs
from localspec.edits.lenient import context_file, reindented
from localspec.edits.mismatch import closest
from localspec.edits.parse import UNFENCED, Edit
from localspec.edits.paths import resolve, shown
from localspec.errors import EditError

__all__ = ["FileChange", "closest", "plan_changes", "resolve", "unified_diff"]


@dataclass(frozen=True)
class FileChange:
    """What one file becomes. `path` is the name shown to the user, `target` the file written
    (links followed); `before` None: the file does not exist yet; `after` None: it is removed
    (undoing the creation of a file). `assumed`: what lenient readings of its blocks took for
    granted, one sentence each, naming the block."""

    path: str
    target: Path
    before: str | None
    after: str | None
    assumed: tuple[str, ...] = ()

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


def plan_changes(
    edits: Sequence[Edit], root: Path, context: Sequence[str] = ()
) -> list[FileChange]:
    """The files `edits` change (paths relative to `root`, which they may not leave) and what
    each becomes; files the edits leave as they are are left out. `context` names the files
    the model was shown: a path that names no file may be read as one of them, never as any
    other. Raises `EditError` with one line per block that does not apply."""
    files: dict[Path, _File] = {}
    edited: set[Path] = set()  # files an earlier block changed: line numbers are after it
    problems: list[str] = []
    for number, written in enumerate(edits, 1):
        where = f"block {number} ({written.kind} for {shown(written.path)}, answer line "
        where += f"{written.line})"
        target = None
        try:
            target, file, edit = _located(written, root, context, files)
            files[target] = file
            file.apply(edit, f"block {number} (answer line {edit.line})")
            edited.add(target)
        except EditError as exc:
            after = " (in the file as the blocks before this one leave it)"
            note = after if target in edited else ""
            problems.extend(f"{where}: {problem}{note}" for problem in exc.problems)
    if problems:
        raise EditError(problems)
    return [file.change() for file in files.values() if file.original != file.after()]


def _located(
    edit: Edit, root: Path, context: Sequence[str], files: dict[Path, _File]
) -> tuple[Path, _File, Edit]:
    """The file `edit` goes to, as read (or as earlier blocks left it), and the edit with
    its path: a SEARCH for a file that does not exist is read as the context file it must
    mean (`lenient.context_file`), checked as any path is."""
    target = resolve(root, edit.path)
    file = files.get(target) or _File.read(edit.path, target)
    if file.text is not None or not edit.search:
        return target, file, edit
    meant = context_file(edit.path, [name for name in context if _usable(root, name)])
    if meant is None:
        return target, file, edit
    path, said = meant
    if resolve(root, path) == target:
        return target, file, edit  # the file it names is gone: said as such, not read anew
    target = resolve(root, path)
    edit = replace(edit, path=path, assumed=(said, *edit.assumed))
    return target, files.get(target) or _File.read(path, target), edit


def _usable(root: Path, name: str) -> bool:
    """Whether a context file is one an edit may go to (under `root`, outside .git)."""
    try:
        resolve(root, name)
    except EditError:
        return False
    return True


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
    assumed: list[str] = field(default_factory=list)

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

    def apply(self, edit: Edit, block: str) -> None:
        """Make `edit`: the lines it puts in take the endings of the lines they replace; what
        its readings assumed is kept, each sentence after `block` (which block it was)."""
        written = _as_written(edit, self.text)
        if written is not None:  # the fences were the file's own (a Markdown file)
            kept = tuple(said for said in edit.assumed if said != UNFENCED)
            edit = replace(edit, search=written[0], replace=written[1], assumed=kept)
        at, end, new, said = _splice(edit, self.text)
        self.assumed.extend(f"{block}: {line}" for line in (*edit.assumed, *said))
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
        after = self.after()
        return FileChange(self.path, self.target, self.original, after, tuple(self.assumed))


def _as_written(edit: Edit, text: str | None) -> tuple[str, str] | None:
    """SEARCH and REPLACE as written, when a block read without its fences matches the file
    with them (its SEARCH had fences taken off, and is in the file exactly); else None."""
    if edit.literal is None or edit.literal[0] == edit.search:
        return None
    return edit.literal if _find_lines(text or "", edit.literal[0]) is not None else None


def _most_crlf(replaced: Sequence[bool], whole: Sequence[bool]) -> bool:
    """Whether new lines end with `\r\n`: when most of the lines they replace do, or, when
    those are as many one way as the other (or none), most of the file's."""
    for flags in (replaced, whole):
        if 2 * sum(flags) != len(flags):
            return 2 * sum(flags) > len(flags)
    return False


def _splice(edit: Edit, text: str | None) -> tuple[int, int, str, tuple[str, ...]]:
    """Where `edit` goes in `text` (None: no such file): the span of it that is replaced, what
    is put there, and what was assumed to find it."""
    if edit.search is None:
        return 0, len(text or ""), edit.replace, ()
    if edit.search == "":
        if text is not None and text.strip():
            raise EditError(
                [
                    f"an empty SEARCH creates a file, but {shown(edit.path)} exists: SEARCH must "
                    f"hold the lines to replace"
                ]
            )
        return 0, len(text or ""), edit.replace, ()
    if text is None:
        raise EditError(
            [
                f"{shown(edit.path)} does not exist: check the path, or give an empty SEARCH to "
                f"create it"
            ]
        )
    at = _find_lines(text, edit.search)
    if at is not None:
        return at, at + len(edit.search), edit.replace, ()
    unended = edit.search.removesuffix("\n")
    start = len(text) - len(unended)
    if not text.endswith("\n") and _at_line_start(text, start, unended):
        # the file's last line has no newline: neither does the replacement's
        return start, len(text), edit.replace.removesuffix("\n"), ()
    found = reindented(text, edit.search, edit.replace)
    if found is not None:
        return found.at, found.end, found.new, (found.assumed,)
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
