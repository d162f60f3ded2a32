"""What the prompt box understands about files: `/add`, `/drop`, `/files`, `@path` mentions,
and completing a path being typed. Pure functions over text (completion lists one folder).

The convention is aider's: commands are the first word of a prompt and are not sent to the
model; only these three are commands, so a question that starts with another slash ("/usr
is...") is sent as it is. An `@` word names a file only when that file exists: `@dataclass` in
a question about Python stays text. `@diff` always means the working tree's `git diff`.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from localspec.context_files import DIFF

COMMANDS = ("add", "drop", "files")
_COMMAND = re.compile(r"/(add|drop|files)(?:\s+(.*))?", re.DOTALL)
# an @ that starts a word (not an e-mail address's), up to white space
_MENTION = re.compile(r"(?<![\w@/])@([^\s@]+)")
# what ends a sentence rather than a path: "look at @x.py." means x.py
_TRAILING = ".,;:!?)]}'\"`"
_MENTION_FRAGMENT = re.compile(r"(?:^|\s)@([^\s@]*)$")
_ADD_FRAGMENT = re.compile(r"^\s*/(?:add|drop)\s+(?:\S+\s+)*(\S*)$")
_SKIPPED = frozenset({"__pycache__", "node_modules"})


@dataclass(frozen=True)
class Command:
    """A file command typed in the prompt: its name and its arguments (paths)."""

    name: str
    args: tuple[str, ...]


def parse_command(text: str) -> Command | None:
    """The command `text` is, or None when it is a prompt for the model."""
    match = _COMMAND.fullmatch(text.strip())
    if match is None:
        return None
    rest = match.group(2) or ""
    try:
        args = shlex.split(rest)  # quotes allow a path with spaces
    except ValueError:  # an unclosed quote: the words as typed
        args = rest.split()
    # `/add @x.py` is `/add x.py`; `@diff` keeps its @, which is what names it
    return Command(match.group(1), tuple(a if a == DIFF else a.removeprefix("@") for a in args))


def mentions(text: str) -> list[str]:
    """The `@` words of a prompt without the @ (`@diff` kept whole), in order, once each."""
    found = []
    for match in _MENTION.finditer(text):
        word = match.group(1).rstrip(_TRAILING)
        found.append(DIFF if word == DIFF[1:] else word)
    return [word for word in dict.fromkeys(found) if word]


def path_fragment(before_cursor: str) -> tuple[str, bool] | None:
    """The path being typed at the end of `before_cursor` (the line up to the cursor), and
    whether it is an `@` mention; None when no path is being typed there."""
    mention = _MENTION_FRAGMENT.search(before_cursor)
    if mention is not None:
        return mention.group(1), True
    command = _ADD_FRAGMENT.match(before_cursor)
    return None if command is None else (command.group(1).removeprefix("@"), False)


def complete_path(root: Path, fragment: str, *, mention: bool = False) -> str:
    """What to append to `fragment` to complete it as a path under `root` ("" for nothing).

    The longest completion all candidates share; a single folder gets its `/`. Hidden names
    are offered only once a `.` is typed; paths that leave `root` are not completed. For an
    `@` mention, `diff` is a candidate too.
    """
    parts = PurePosixPath(fragment).parts
    if fragment.startswith(("/", "~")) or ".." in parts:
        return ""
    head, _, prefix = fragment.rpartition("/")
    try:
        with os.scandir(root / head if head else root) as entries:
            names = [(entry.name, entry.is_dir()) for entry in entries]
    except OSError:
        return ""
    if mention and not head:
        names.append((DIFF[1:], False))
    matches = sorted(
        (name, folder)
        for name, folder in names
        if name.startswith(prefix)
        and name not in _SKIPPED
        and (prefix.startswith(".") or not name.startswith("."))
    )
    if not matches:
        return ""
    # names in one folder, not paths: the shared start character by character is the completion
    common = os.path.commonprefix([name for name, _ in matches])  # noqa: RUF071
    if len(matches) == 1 and matches[0][1]:
        common += "/"
    return common[len(prefix) :]
