"""Which file an edit's path names, and the paths refused before any file is touched.

The path comes from a model's answer, so anything may be in it. It must name a file under the
working folder once its links are followed; names no file system takes (a NUL byte, a name
over 255 bytes), names a terminal would act on (control characters), a `~` that only a shell
expands, and git's own folder (a hook written there runs on the next commit) are refused with
one line that says why.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from localspec.errors import EditError

NAME_MAX = 255  # bytes in one file name (Linux, macOS)
PATH_MAX = 4096  # bytes in a whole path
_SHOWN = 60  # characters of a long path quoted in a message


def resolve(root: Path, name: str) -> Path:
    """The file `name` (relative to `root`, or absolute) really is, links followed; refused
    when it lies outside `root`: an answer must not write anywhere the user did not point at."""
    _check_name(name)
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / name))
    if not target.is_relative_to(base):
        raise EditError(
            [f"{shown(name)} is outside {base}: edits only go to files under the working folder"]
        )
    if _in_git(target.relative_to(base)):
        raise EditError(
            [f"{shown(name)} is inside .git: edits do not go to git's own files (a hook would run)"]
        )
    return target


def shown(name: str) -> str:
    """`name` as a message quotes it: escaped when it holds characters a terminal would act
    on, cut short when it is long."""
    text = name if name.isprintable() else ascii(name)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _check_name(name: str) -> None:
    problem = _name_problem(name)
    if problem is not None:
        raise EditError([f"the path {shown(name)} {problem}"])


def _name_problem(name: str) -> str | None:
    """What makes `name` unusable as a path, or None."""
    if "\0" in name:
        return "holds a NUL byte, which no file name can: ask for the file's real path"
    if not name.isprintable():
        return "holds control characters: ask for the file's real path"
    if name.startswith("~"):
        return (
            "starts with ~, which only a shell turns into a home folder: give the path "
            "relative to the working folder"
        )
    try:
        encoded = [os.fsencode(part) for part in PurePath(name).parts]
    except UnicodeEncodeError:
        return "is not a name the file system can store: ask for the file's real path"
    longest = max(encoded, key=len, default=b"")
    if len(longest) > NAME_MAX:
        return f"has a name of {len(longest)} bytes, over the {NAME_MAX} a file name may have"
    if sum(len(part) + 1 for part in encoded) > PATH_MAX:
        return f"is over the {PATH_MAX} bytes a path may have"
    return None


def _in_git(path: PurePath) -> bool:
    return any(part.casefold() == ".git" for part in path.parts)
