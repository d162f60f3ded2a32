"""Applying parsed edits to the files as they are now, in memory: what each file becomes, and
its unified diff. Nothing here writes (see `write`): every block is checked first, so that one
block that does not apply leaves every file untouched.

A SEARCH text must match the file exactly, as whole lines; the one difference allowed is the
file's missing final newline. Blocks for the same file apply in order, each to the result of
the ones before it, and a SEARCH that occurs twice changes the first occurrence (aider's rule,
which the models were taught). A file with Windows line endings is matched with `\n` and
written back with `\r\n`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from localspec.edits.parse import Edit
from localspec.errors import EditError

_ALIKE = 0.6  # how alike the closest lines must be to be worth pointing at
_SCAN_LIMIT = 400_000  # line pairs compared when looking for the closest lines
_SHOWN = 60  # characters of a line quoted in a message


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
        where = f"block {number} ({edit.kind} for {edit.path}, answer line {edit.line})"
        target = None
        try:
            target = resolve(root, edit.path)
            file = files.get(target) or _File.read(edit.path, target)
            files[target] = file
            file.text = _applied(edit, file.text)
            edited.add(target)
        except EditError as exc:
            after = " (in the file as the blocks before this one leave it)"
            note = after if target in edited else ""
            problems.extend(f"{where}: {problem}{note}" for problem in exc.problems)
    if problems:
        raise EditError(problems)
    return [file.change() for file in files.values() if file.original != file.after()]


def resolve(root: Path, name: str) -> Path:
    """The file `name` (relative to `root`, or absolute) really is, links followed; refused
    when it lies outside `root`: an answer must not write anywhere the user did not point at."""
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / name))
    if not target.is_relative_to(base):
        raise EditError(
            [f"{name} is outside {base}: edits only go to files under the working folder"]
        )
    return target


@dataclass
class _File:
    """A file while its blocks apply: its text as read (`original`), as edited so far (`text`,
    with `\n` endings), and whether it is written with `\r\n`."""

    path: str
    target: Path
    original: str | None
    text: str | None
    crlf: bool

    @classmethod
    def read(cls, path: str, target: Path) -> _File:
        if target.is_dir():
            raise EditError([f"{path} is a folder: name a file"])
        try:
            original = target.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return cls(path, target, None, None, crlf=False)
        except UnicodeDecodeError as exc:
            raise EditError([f"{path} is not UTF-8 text: edit it by hand"]) from exc
        except OSError as exc:
            raise EditError([f"cannot read {path}: {exc.strerror}"]) from exc
        crlf = "\r\n" in original
        return cls(path, target, original, original.replace("\r\n", "\n"), crlf)

    def after(self) -> str | None:
        if self.text is None or not self.crlf:
            return self.text
        return self.text.replace("\n", "\r\n")

    def change(self) -> FileChange:
        return FileChange(self.path, self.target, self.original, self.after())


def _applied(edit: Edit, text: str | None) -> str:
    """`text` (None: no such file) with `edit` made."""
    if edit.search is None:
        return edit.replace
    if edit.search == "":
        if text is not None and text.strip():
            raise EditError(
                [
                    f"an empty SEARCH creates a file, but {edit.path} exists: SEARCH must hold "
                    f"the lines to replace"
                ]
            )
        return edit.replace
    if text is None:
        raise EditError(
            [f"{edit.path} does not exist: check the path, or give an empty SEARCH to create it"]
        )
    at = _find_lines(text, edit.search)
    if at is not None:
        return text[:at] + edit.replace + text[at + len(edit.search) :]
    unended = edit.search.removesuffix("\n")
    if not text.endswith("\n") and _at_line_start(text, len(text) - len(unended), unended):
        # the file's last line has no newline: neither does the replacement's
        return text[: len(text) - len(unended)] + edit.replace.removesuffix("\n")
    raise EditError([f"the SEARCH text is not in {edit.path} exactly; {closest(edit, text)}"])


def _find_lines(text: str, search: str) -> int | None:
    """Where `search` first occurs in `text` starting a line, or None."""
    at = text.find(search)
    while at != -1 and not _at_line_start(text, at, search):
        at = text.find(search, at + 1)
    return None if at == -1 else at


def _at_line_start(text: str, at: int, search: str) -> bool:
    return at >= 0 and text.startswith(search, at) and (at == 0 or text[at - 1] == "\n")


def closest(edit: Edit, text: str) -> str:
    """Where the file's lines come closest to the SEARCH text and how they differ: what the
    user needs to see to fix the block (or to ask the model again)."""
    wanted = (edit.search or "").splitlines()
    have = text.splitlines()
    start, score = _best_window(wanted, have)
    if score < _ALIKE:
        return "no lines of it are alike: ask the model to copy the file's lines exactly"
    for offset, line in enumerate(wanted):
        found = have[start + offset] if start + offset < len(have) else None
        if found == line:
            continue
        number = start + offset + 1
        if found is None:
            return f"the closest lines end the file at line {number - 1} before SEARCH does"
        kind = (
            "only in white space"
            if "".join(found.split()) == "".join(line.split())
            else "in its text"
        )
        return (
            f"the closest is line {number}, which differs {kind}: the file has "
            f"{_quoted(found)}, SEARCH has {_quoted(line)}"
        )
    return f"the closest is line {start + 1}"


def _best_window(wanted: list[str], have: list[str]) -> tuple[int, float]:
    """The start of the run of `have` most like `wanted`, and how alike (0 to 1)."""
    size = max(1, len(wanted))
    exact_only = len(have) * size > _SCAN_LIMIT  # a big file: equal lines are counted only
    best = (0, 0.0)
    for start in range(max(1, len(have) - size + 1)):
        window = have[start : start + size]
        total = sum(_alike(a, b, exact_only) for a, b in zip(wanted, window, strict=False))
        if total / size > best[1]:
            best = (start, total / size)
    return best


def _alike(a: str, b: str, exact_only: bool) -> float:
    if a == b:
        return 1.0
    if exact_only:
        return 0.0
    return difflib.SequenceMatcher(None, a.strip(), b.strip()).quick_ratio()


def _quoted(line: str) -> str:
    return repr(line if len(line) <= _SHOWN else line[:_SHOWN] + "…")


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
