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

Any other fenced block is a whole-file block only when it names (in its info string or on the
line just before it) one of the files the user added to the conversation: an answer is full of
example code, and only a block for a file the model was shown can mean "this file, rewritten".
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import PurePosixPath

from localspec.errors import EditError

HEAD = re.compile(r"^\s*<{5,9} SEARCH>?\s*$")
DIVIDER = re.compile(r"^\s*={5,9}\s*$")
UPDATED = re.compile(r"^\s*>{5,9} REPLACE\s*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_EXTENSION = re.compile(r"\.\w+")  # "```.py": a language given as an extension, not a file
_LOOK_BACK = 3  # lines searched above a SEARCH marker for its path (past fence lines only)


@dataclass(frozen=True)
class Edit:
    """One change an answer asks for.

    `search` None: `replace` is the file's whole new content; "": the file is created with
    `replace`; otherwise the exact text `search` becomes `replace`. `line` is where the block
    starts in the answer (1-based), so that a failing block can be pointed at.
    """

    path: str
    search: str | None
    replace: str
    line: int

    @property
    def kind(self) -> str:
        if self.search is None:
            return "whole file"
        return "new file" if self.search == "" else "SEARCH/REPLACE"


def parse_edits(answer: str, added: Collection[str] = ()) -> list[Edit]:
    """The edits in `answer`, in order; `added` names the files the model was shown (the only
    ones a whole-file block can be for). A malformed SEARCH/REPLACE block raises `EditError`."""
    lines = answer.replace("\r\n", "\n").splitlines(keepends=True)
    names = {clean_name(name) for name in added}
    fences = _Fences(lines)
    edits: list[Edit] = []
    current: str | None = None  # the file of the previous SEARCH/REPLACE block
    inside: str | None = None  # the marker of an open fence that holds SEARCH/REPLACE blocks
    i = 0
    while i < len(lines):
        if HEAD.match(lines[i]):
            path = _path_above(lines, i, names) or current
            if path is None:
                raise EditError(
                    [
                        f"the SEARCH/REPLACE block at line {i + 1} of the answer names no file: "
                        f"the file's path must stand alone on the line before the opening fence"
                    ]
                )
            edit, i = _search_replace(lines, i, path)
            edits.append(edit)
            current = path
            continue
        fence = fences.found[i]
        if inside is not None:
            if fence and _closes(fence, inside):
                inside = None
        elif fence:
            end = fences.closing(i, fence.group(1))
            if end is not None and not any(HEAD.match(line) for line in lines[i + 1 : end]):
                whole = _whole_file(lines, i, end, fence.group(2), names)
                edits.extend([whole] if whole is not None else [])
                i = end
            elif end is not None:
                inside = fence.group(1)
        i += 1
    return edits


def clean_name(text: str) -> str:
    """A path as a model writes it, without the decoration around it (`**a.py**`, `a.py:`,
    "# a.py", a leading "./")."""
    name = text.strip().rstrip(":").lstrip("#").strip().strip("`*\"'")
    return name.removeprefix("./")


def _as_path(text: str, names: set[str]) -> str | None:
    """`text` as a file path, or None when it reads as prose (or is empty)."""
    name = clean_name(text)
    if not name or any(c.isspace() for c in name) or _EXTENSION.fullmatch(name):
        return None
    if name in names:
        return name
    alike = [known for known in names if PurePosixPath(known).name == name]
    if len(alike) == 1:  # the model dropped the folder of a file it was shown
        return alike[0]
    return name if ("." in name or "/" in name) else None


def _info_path(info: str, names: set[str]) -> str | None:
    """A path given in a fence's info string: "```python src/a.py", "```a.py", "title=a.py"."""
    for word in info.split():
        path = _as_path(word.split("=", 1)[-1], names)
        if path is not None:
            return path
    return None


def _path_above(lines: list[str], head: int, names: set[str]) -> str | None:
    """The path written just above a SEARCH marker: on a line of its own or in the info string
    of the fence lines in between."""
    for row in range(head - 1, max(-1, head - 1 - _LOOK_BACK), -1):
        fence = FENCE.match(lines[row])
        if fence is None:
            return _as_path(lines[row], names)
        path = _info_path(fence.group(2), names)
        if path is not None:
            return path
    return None


def _search_replace(lines: list[str], head: int, path: str) -> tuple[Edit, int]:
    """The block starting at the SEARCH marker on line `head`, and the line after it."""
    row = head + 1
    search: list[str] = []
    while row < len(lines) and not DIVIDER.match(lines[row]):
        if HEAD.match(lines[row]) or UPDATED.match(lines[row]):
            break
        search.append(lines[row])
        row += 1
    if row >= len(lines) or not DIVIDER.match(lines[row]):
        raise EditError([_unfinished(head, path, "=======")])
    row += 1
    replace: list[str] = []
    while row < len(lines) and not UPDATED.match(lines[row]):
        if HEAD.match(lines[row]):
            break
        replace.append(lines[row])
        row += 1
    if row >= len(lines) or not UPDATED.match(lines[row]):
        raise EditError([_unfinished(head, path, ">>>>>>> REPLACE")])
    return Edit(path, "".join(search), "".join(replace), head + 1), row + 1


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


def _whole_file(lines: list[str], start: int, end: int, info: str, names: set[str]) -> Edit | None:
    """The fenced block on lines `start`..`end` as a whole new file, when it names an added
    file."""
    above = _as_path(lines[start - 1], names) if start > 0 else None
    for path in (_info_path(info, names), above):
        if path is not None and path in names:
            return Edit(path, None, "".join(lines[start + 1 : end]), start + 1)
    return None
