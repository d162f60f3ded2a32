"""Readings of an edit that does not follow the format to the letter, each said out loud.

Small local models follow the SEARCH/REPLACE format only so far: they drop the `<<<<<<<` of
the opening marker, wrap SEARCH and REPLACE in their own code fences, name the format's
placeholder (`path/to/store.py`) instead of the file, or copy a line without its indentation.
aider reads such answers leniently, and users expect that. Here a lenient reading is taken only
when it is unambiguous (one file it can mean, one place it can match), and each one returns a
sentence saying what was assumed: the diff view and `complete --apply` show it before anything
is written. Exact readings always come first; these run only where the exact one found nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

# an opening marker without some of its `<` ("SEARCH", "<<< SEARCH", "SEARCH:")
LOOSE_HEAD = re.compile(r"^\s*(?:<{1,9}\s*)?SEARCH\s*:?\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# the folder of the format's example path, which models copy in front of the real file name
PLACEHOLDER = "path/to/"
BUDGET = 2_000_000  # lines compared at most when looking for a SEARCH without its indentation


@dataclass(frozen=True)
class Spliced:
    """Where a SEARCH text was found in a file by a lenient reading: the span of the file's
    text replaced, what is put there, and what was assumed."""

    at: int
    end: int
    new: str
    assumed: str


def unfenced(lines: Sequence[str]) -> list[str] | None:
    """`lines` without a code fence wrapped around all of them (blank lines around it
    allowed), or None when they are not one fenced block: a model that puts SEARCH and
    REPLACE in fences of their own means the code inside."""
    first, last = 0, len(lines) - 1
    while first <= last and not lines[first].strip():
        first += 1
    while last > first and not lines[last].strip():
        last -= 1
    if last <= first:
        return None
    opening, closing = _FENCE.match(lines[first]), _FENCE.match(lines[last])
    if opening is None or closing is None or closing.group(2).strip():
        return None
    marker, end = opening.group(1), closing.group(1)
    if end[0] != marker[0] or len(end) < len(marker):
        return None
    inside = lines[first + 1 : last]
    if any(_FENCE.match(line) for line in inside):
        return None  # fences within fences: no single reading
    return list(inside)


def context_file(name: str, context: Sequence[str]) -> tuple[str, str] | None:
    """The one file of `context` that `name` (a path that names no file) must mean, and the
    sentence saying why; None when there is not exactly one. The base name decides (a model
    drops or invents folders); the format's placeholder path means the only file there is."""
    path = PurePosixPath(name)
    alike = [known for known in dict.fromkeys(context) if PurePosixPath(known).name == path.name]
    if len(alike) == 1:
        return alike[0], f"{name} names no file: read as {alike[0]}, the one file of that name"
    if name.startswith(PLACEHOLDER) and len(set(context)) == 1:
        only = context[0]
        return only, (
            f"{name} is the format's example path: read as {only}, the only file in the context"
        )
    return None


def reindented(text: str, search: str, replace: str) -> Spliced | None:
    """`search` found in `text` (`\n` line endings) when the leading white space of its lines
    is ignored, with `replace` indented as the file is there; None unless exactly one place
    matches, every line there by the same shift of indentation (aider's rule, made
    unambiguous). The lines compared are bounded (`BUDGET`): past it, no reading is taken."""
    wanted, extra = _outdented(search.splitlines(), replace.splitlines())
    if not any(line.strip() for line in wanted):
        return None
    have = text.split("\n")
    if text.endswith("\n"):
        have.pop()  # the empty piece after the last newline is no line
    found: list[tuple[int, str]] = []
    budget = BUDGET
    for row in range(len(have) - len(wanted) + 1):
        prefix, compared = _shift(have, row, wanted)
        budget -= compared
        if prefix is not None:
            found.append((row, prefix))
        if len(found) > 1 or budget < 0:
            return None
    if not found:
        return None
    row, prefix = found[0]
    starts = [0]
    for line in have:
        starts.append(starts[-1] + len(line) + 1)
    at, end = starts[row], min(starts[row + len(wanted)], len(text))
    new = "".join((prefix + line if line.strip() else line) + "\n" for line in extra)
    if not text.endswith("\n", at, end):  # the file's last line, without a newline
        new = new.removesuffix("\n")
    return Spliced(at, end, new, _said(row, prefix))


def _outdented(search: list[str], replace: list[str]) -> tuple[list[str], list[str]]:
    """Both texts without the indentation all their lines share (a model that indents SEARCH
    deeper than the file does so uniformly, REPLACE with it)."""
    leads = [_lead(line) for line in [*search, *replace] if line.strip()]
    common = leads[0] if leads else ""
    for lead in leads[1:]:
        while not lead.startswith(common):
            common = common[:-1]
    cut = len(common)
    return [line[cut:] if line.strip() else "" for line in search], [
        line[cut:] if line.strip() else "" for line in replace
    ]


def _shift(lines: Sequence[str], row: int, wanted: Sequence[str]) -> tuple[str | None, int]:
    """The one indentation that, put before every non-blank line of `wanted`, gives the
    lines from `row` on (None when there is none: blank lines must be blank in both), and
    how many lines were compared to find out (no window is copied: the first line that
    differs ends the comparison)."""
    prefix: str | None = None
    for compared, line in enumerate(wanted, 1):
        have = lines[row + compared - 1]
        if not line.strip():
            if have.strip():
                return None, compared
            continue
        lead = have[: len(have) - len(line)]
        if not have.endswith(line) or lead.strip() or prefix not in (None, lead):
            return None, compared
        prefix = lead
    return prefix, len(wanted)


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _said(row: int, prefix: str) -> str:
    """The reading in words: where SEARCH matched and the indentation it was given."""
    if not prefix:
        indent = "with the file's indentation"
    elif set(prefix) == {" "}:
        indent = f"indented {len(prefix)} spaces as the file is there"
    elif set(prefix) == {"\t"}:
        indent = f"indented {len(prefix)} tabs as the file is there"
    else:
        indent = f"indented {prefix!r} as the file is there"
    return (
        f"SEARCH matches line {row + 1} only when leading white space is ignored: applied {indent}"
    )
