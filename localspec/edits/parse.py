"""Finding the edits in a model's answer: SEARCH/REPLACE blocks and whole-file code blocks.

A SEARCH/REPLACE block follows aider's convention, which code models have learned:

    path/to/file.py
    ```python
    <<<<<<< SEARCH
    the exact lines to find
    =======
    the lines to put there instead
    >>>>>>> REPLACE
    ```

The path stands alone on the line before the fence, in the fence's info string, or on the line
inside the fence before the SEARCH marker; a block that names none belongs to the file of the
block before it (several blocks in one fence). An empty SEARCH creates a new file.

Where a block is unambiguous but not to the letter (`lenient`), it is read and what was assumed
is kept with the edit: a bare `SEARCH` for the opening marker, a fenced block that holds only
`=======` and `>>>>>>> REPLACE` (its SEARCH starts at the fence), SEARCH and REPLACE each in a
fence of their own, a block that names no file when one file was given.

Any other fenced block is a whole-file block only when it names (in its info string or on the
line just before it) one of the files the user added to the conversation: an answer is full of
example code, and only a block for a file the model was shown can mean "this file, rewritten".
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import PurePosixPath

from localspec.edits.lenient import LOOSE_HEAD, unfenced
from localspec.errors import EditError

HEAD = re.compile(r"^\s*<{5,9} SEARCH>?\s*$")
DIVIDER = re.compile(r"^\s*={5,9}\s*$")
UPDATED = re.compile(r"^\s*>{5,9} REPLACE\s*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_EXTENSION = re.compile(r"\.\w+")  # "```.py": a language given as an extension, not a file
_LOOK_BACK = 3  # lines searched above a SEARCH marker for its path (past fence lines only)
# what is said of a block whose SEARCH and REPLACE came in fences of their own
UNFENCED = "SEARCH and REPLACE were each in a code fence of their own: read without the fences"


@dataclass(frozen=True)
class Edit:
    """One change an answer asks for.

    `search` None: `replace` is the file's whole new content; "": the file is created with
    `replace`; otherwise the exact text `search` becomes `replace`. `line` is where the block
    starts in the answer (1-based), so that a failing block can be pointed at. `assumed` says
    what a lenient reading took for granted (`lenient`); `literal` holds SEARCH and REPLACE as
    written when that reading took fences off them (tried first: a Markdown file holds
    fences).
    """

    path: str
    search: str | None
    replace: str
    line: int
    assumed: tuple[str, ...] = ()
    literal: tuple[str, str] | None = None

    @property
    def kind(self) -> str:
        if self.search is None:
            return "whole file"
        return "new file" if self.search == "" else "SEARCH/REPLACE"


@dataclass(frozen=True)
class Block:
    """The rows `first` to `end` (exclusive) of an answer that one edit takes, with the fence
    and path lines around it: the edit read there, or the problem that makes it unreadable."""

    first: int
    end: int
    edit: Edit | None
    problem: str | None = None


def parse_edits(answer: str, added: Collection[str] = ()) -> list[Edit]:
    """The edits in `answer`, in order; `added` names the files the model was shown (the only
    ones a whole-file block can be for). A malformed SEARCH/REPLACE block raises `EditError`."""
    blocks = scan(answer, added)
    problems = [block.problem for block in blocks if block.problem is not None]
    if problems:
        raise EditError(problems)
    return [block.edit for block in blocks if block.edit is not None]


def scan(answer: str, added: Collection[str] = ()) -> list[Block]:
    """The blocks of `answer`, edits and malformed ones alike, in order (`parse_edits`)."""
    return _Scanner(lines_of(answer), {clean_name(name) for name in added}).blocks()


def lines_of(answer: str) -> list[str]:
    """The answer's lines as `scan` numbers its rows: split at `\n` alone (str.splitlines
    would also split at a form feed or a lone `\r` inside a line, and could then find a
    marker in the middle of one)."""
    pieces = answer.replace("\r\n", "\n").split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def clean_name(text: str) -> str:
    """A path as a model writes it, without the decoration around it (`**a.py**`, `a.py:`,
    "# a.py", a leading "./")."""
    name = text.strip().rstrip(":").lstrip("#").strip().strip("`*\"'")
    return name.removeprefix("./")


class _Scanner:
    """One pass over an answer's lines, finding its blocks: SEARCH/REPLACE blocks (strict, or
    read leniently where that is unambiguous) and whole-file blocks for added files."""

    def __init__(self, lines: list[str], names: set[str]) -> None:
        self.lines, self.names = lines, names
        self.fences = _Fences(lines)
        self.current: str | None = None  # the file of the previous SEARCH/REPLACE block

    def blocks(self) -> list[Block]:
        found: list[Block] = []
        inside: str | None = None  # the marker of an open fence that holds SEARCH/REPLACE blocks
        i = 0
        while i < len(self.lines):
            block = self._search_replace(i)
            if block is not None:
                end = block.end
                after = self.fences.found[end] if end < len(self.lines) else None
                if inside is not None and after and _closes(after, inside):
                    inside, end = None, end + 1  # the fence around the blocks is theirs
                found.append(Block(block.first, end, block.edit, block.problem))
                i = end
                continue
            fence = self.fences.found[i]
            if inside is not None:
                if fence and _closes(fence, inside):
                    inside = None
            elif fence:
                close = self.fences.closing(i, fence.group(1))
                if close is not None and not any(map(_opens, self.lines[i + 1 : close])):
                    block = self._unopened(i, close) or self._whole_file(i, close, fence.group(2))
                    found.extend([block] if block is not None else [])
                    i = close
                elif close is not None:
                    inside = fence.group(1)
            i += 1
        return found

    def _search_replace(self, head: int) -> Block | None:
        """The block whose opening marker is on row `head`; None when there is none there (a
        line that only looks like a marker and starts no whole block is text)."""
        strict = HEAD.match(self.lines[head]) is not None
        if not strict and not LOOSE_HEAD.match(self.lines[head]):
            return None
        # a bare SEARCH ends at any marker: a run of them costs one pass, not one per line
        search, replace, end, missing = _parts(self.lines, head, _strict if strict else _opens)
        if missing is not None and not strict:
            return None
        path, first, assumed = self._path(head)
        if not strict:
            marker = self.lines[head].strip()
            assumed = (f"`{marker}` read as the `<<<<<<< SEARCH` marker", *assumed)
        if path is None:
            problem = (
                f"the SEARCH/REPLACE block at line {head + 1} of the answer names no file: "
                f"the file's path must stand alone on the line before the opening fence"
            )
            return Block(first, end, None, problem)
        if missing is not None:
            return Block(first, end, None, _unfinished(head, path, missing))
        self.current = path
        return Block(first, end, _edit(path, search, replace, head + 1, assumed))

    def _unopened(self, start: int, end: int) -> Block | None:
        """The fenced block on rows `start`..`end` read as a SEARCH/REPLACE block that lost its
        opening marker: one `=======` and one `>>>>>>> REPLACE` in it, in that order, nothing
        after them but blank lines. SEARCH is then everything from the fence to `=======`."""
        rows = range(start + 1, end)
        dividers = [row for row in rows if DIVIDER.match(self.lines[row])]
        updated = [row for row in rows if UPDATED.match(self.lines[row])]
        if len(dividers) != 1 or len(updated) != 1 or dividers[0] > updated[0]:
            return None
        if any(self.lines[row].strip() for row in range(updated[0] + 1, end)):
            return None
        path, first, assumed = self._path(start + 1)
        if path is None:
            return None
        said = f"the block has no `<<<<<<< SEARCH` line: SEARCH read from line {start + 2} on"
        search = self.lines[start + 1 : dividers[0]]
        replace = self.lines[dividers[0] + 1 : updated[0]]
        self.current = path
        edit = _edit(path, search, replace, start + 2, (said, *assumed))
        return Block(first, end + 1, edit)

    def _path(self, head: int) -> tuple[str | None, int, tuple[str, ...]]:
        """The file of the block starting at row `head`, the first row of the block's lines
        (with its path and fences), and what was assumed to find the file."""
        path, first = _path_above(self.lines, head, self.names)
        if path is not None or self.current is not None:
            return path or self.current, first, ()
        if len(self.names) == 1:
            (only,) = self.names
            return only, first, (f"the block names no file: read as {only}, the only file given",)
        return None, first, ()

    def _whole_file(self, start: int, end: int, info: str) -> Block | None:
        """The fenced block on rows `start`..`end` as a whole new file, when it names an added
        file."""
        lines, names = self.lines, self.names
        above = _as_path(lines[start - 1]) if start > 0 else None
        for path, first in ((_info_path(info), start), (above, start - 1)):
            named = _added(path, names)
            if named is not None:
                content = "".join(lines[start + 1 : end])
                return Block(first, end + 1, Edit(named[0], None, content, start + 1, named[1]))
        return None


def _opens(line: str) -> bool:
    return HEAD.match(line) is not None or LOOSE_HEAD.match(line) is not None


def _strict(line: str) -> bool:
    return HEAD.match(line) is not None


def _edit(
    path: str, search: list[str], replace: list[str], line: int, assumed: tuple[str, ...]
) -> Edit:
    """The edit of a block's lines; SEARCH and REPLACE in fences of their own are read
    without them (the text as written is kept in `literal`)."""
    bare_search, bare_replace = unfenced(search), unfenced(replace)
    written = ("".join(search), "".join(replace))
    if bare_search is None and bare_replace is None:
        return Edit(path, written[0], written[1], line, assumed)
    search_text = "".join(search if bare_search is None else bare_search)
    replace_text = "".join(replace if bare_replace is None else bare_replace)
    return Edit(path, search_text, replace_text, line, (*assumed, UNFENCED), written)


def _added(path: str | None, names: set[str]) -> tuple[str, tuple[str, ...]] | None:
    """The added file `path` names (by its base name when the model dropped its folder), and
    what was assumed; None when it names none."""
    if path is None:
        return None
    if path in names:
        return path, ()
    alike = [known for known in names if PurePosixPath(known).name == path]
    if len(alike) != 1:
        return None
    return alike[0], (f"{path} read as {alike[0]}, the one file of that name given",)


def _as_path(text: str) -> str | None:
    """`text` as a file path, or None when it reads as prose (or is empty)."""
    name = clean_name(text)
    if not name or any(c.isspace() for c in name) or _EXTENSION.fullmatch(name):
        return None
    return name if ("." in name or "/" in name) else None


def _info_path(info: str) -> str | None:
    """A path given in a fence's info string: "```python src/a.py", "```a.py", "title=a.py"."""
    for word in info.split():
        path = _as_path(word.split("=", 1)[-1])
        if path is not None:
            return path
    return None


def _path_above(lines: list[str], head: int, names: set[str]) -> tuple[str | None, int]:
    """The path written just above a SEARCH marker (on a line of its own or in the info
    string of the fence lines in between), as written, and the first row of the block with
    it. Which file it names is decided where the files are (`apply`)."""
    for row in range(head - 1, max(-1, head - 1 - _LOOK_BACK), -1):
        fence = FENCE.match(lines[row])
        if fence is None:
            path = _as_path(lines[row])
            return (path, row) if path is not None else (None, row + 1)
        path = _info_path(fence.group(2))
        if path is not None:
            return path, row
    return None, max(0, head - _LOOK_BACK)


def _parts(
    lines: list[str], head: int, opens: Callable[[str], bool]
) -> tuple[list[str], list[str], int, str | None]:
    """The SEARCH and REPLACE lines of the block whose marker is on row `head`, the row after
    it, and the marker missing when it is unfinished (None: it is whole); a line for which
    `opens` holds starts another block."""
    row = head + 1
    search: list[str] = []
    while row < len(lines) and not DIVIDER.match(lines[row]):
        if opens(lines[row]) or UPDATED.match(lines[row]):
            return search, [], row, "======="
        search.append(lines[row])
        row += 1
    if row >= len(lines):
        return search, [], row, "======="
    row += 1
    replace: list[str] = []
    while row < len(lines) and not UPDATED.match(lines[row]):
        if opens(lines[row]):
            return search, replace, row, ">>>>>>> REPLACE"
        replace.append(lines[row])
        row += 1
    if row >= len(lines):
        return search, replace, row, ">>>>>>> REPLACE"
    return search, replace, row + 1, None


def _unfinished(head: int, path: str, missing: str) -> str:
    return (
        f"the SEARCH/REPLACE block for {path} at line {head + 1} of the answer has no "
        f"`{missing}` line: if the answer was cut short, raise the answer's token limit and "
        f"ask again; otherwise ask for well-formed blocks"
    )


def _closes(fence: re.Match[str], marker: str) -> bool:
    """Whether a fence line closes a fence opened with `marker` (CommonMark: the same
    character, at least as many, nothing after it)."""
    found = fence.group(1)
    return found[0] == marker[0] and len(found) >= len(marker) and not fence.group(2).strip()


class _Fences:
    """The answer's fence lines, matched once, and where a fence closes: at the first bare
    fence of its character at least as long, found by jumping from each bare fence to the next
    longer one. An answer of thousands of fences that never close (a model looping on "```")
    costs one pass, not one pass of the rest of the answer per fence."""

    def __init__(self, lines: list[str]) -> None:
        self.found = [FENCE.match(line) for line in lines]
        bare: dict[str, list[tuple[int, int]]] = {}  # character: (row, length) of bare fences
        for row, fence in enumerate(self.found):
            if fence and not fence.group(2).strip():
                bare.setdefault(fence.group(1)[0], []).append((row, len(fence.group(1))))
        self.bare = {char: _with_longer(found) for char, found in bare.items()}

    def closing(self, start: int, marker: str) -> int | None:
        """The row of the fence that closes the one opened with `marker` on row `start`."""
        rows, lengths, longer = self.bare.get(marker[0], ([], [], []))
        at = bisect.bisect_right(rows, start)
        while at < len(rows) and lengths[at] < len(marker):
            at = longer[at]  # the bare fences skipped are all shorter still
        return rows[at] if at < len(rows) else None


def _with_longer(fences: list[tuple[int, int]]) -> tuple[list[int], list[int], list[int]]:
    """The fences' rows, lengths, and for each the index of the next longer one (past the end:
    none)."""
    lengths = [length for _, length in fences]
    longer = [len(fences)] * len(fences)
    waiting: list[int] = []  # fences not yet followed by a longer one, longest first
    for at, length in enumerate(lengths):
        while waiting and lengths[waiting[-1]] < length:
            longer[waiting.pop()] = at
        waiting.append(at)
    return [row for row, _ in fences], lengths, longer
