"""Where a file comes closest to a SEARCH text that is not in it, and how the two differ: what
the user needs to see to fix the block (or to ask the model again).

The work is bounded whatever the file: a line is compared by its first `LINE_CHARS`
characters, a window by its first `ROWS` lines, and only a file small enough for `BUDGET` has
every window compared. In a bigger one only the windows that the SEARCH text's own lines anchor
are (a line found there but for white space, and not so common that it tells nothing, as a
blank line or a lone brace), so that a 20 MB file of long lines is answered at once.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Sequence

from localspec.edits.parse import Edit

ALIKE = 0.6  # how alike the closest lines must be to be worth pointing at
LINE_CHARS = 200  # characters of a line compared
ROWS = 200  # lines of the SEARCH text compared
BUDGET = 4_000_000  # characters compared at most when every window of a file is
PAIR_COST = 32  # what comparing two lines costs beyond their characters, in characters
CANDIDATES = 16  # windows compared in a file too big for every window
COMMON = 32  # a line found more often than this in the file anchors no window
_SHOWN = 60  # characters of a line quoted in a message


def closest(edit: Edit, text: str) -> str:
    """Where the file's lines come closest to the SEARCH text and how they differ."""
    wanted = (edit.search or "").splitlines()
    have = text.splitlines()
    start, score = _best_window(wanted, have)
    if score < ALIKE:
        return "no lines of it are alike: ask the model to copy the file's lines exactly"
    for offset, line in enumerate(wanted):
        found = have[start + offset] if start + offset < len(have) else None
        if found == line:
            continue
        number = start + offset + 1
        if found is None:
            return f"the closest lines end the file at line {number - 1} before SEARCH does"
        alike = "".join(found.split()) == "".join(line.split())
        kind = "only in white space" if alike else "in its text"
        return (
            f"the closest is line {number}, which differs {kind}: the file has "
            f"{_quoted(found)}, SEARCH has {_quoted(line)}"
        )
    return f"the closest is line {start + 1}"


def _best_window(wanted: list[str], have: list[str]) -> tuple[int, float]:
    """The start of the run of `have` most like `wanted`, and how alike (0 to 1)."""
    size = max(1, len(wanted))
    rows = min(size, ROWS)
    mine = [_cut(line) for line in wanted[:rows]]
    cost = rows * (sum(map(len, have)) + PAIR_COST * len(have))  # at most, lines cut short
    starts: Iterable[int] = range(max(1, len(have) - size + 1))
    if cost > BUDGET:
        starts = _anchored(wanted[:rows], have)
    best = (0, 0.0)
    for start in starts:
        window = [_cut(line) for line in have[start : start + rows]]
        total = sum(_alike(a, b) for a, b in zip(mine, window, strict=False))
        if total / rows > best[1]:
            best = (start, total / rows)
    return best


def _anchored(wanted: Sequence[str], have: Sequence[str]) -> list[int]:
    """The starts of the windows of `have` that lines of `wanted` anchor, the most anchored
    first: at most `CANDIDATES`, from at most `COMMON` places for each line."""
    places: dict[str, list[int]] = {}
    for row, line in enumerate(have):
        found = places.setdefault(_bare(line), [])
        if len(found) <= COMMON:
            found.append(row)
    votes: Counter[int] = Counter()
    for offset, line in enumerate(wanted):
        found = places.get(_bare(line), [])
        if _bare(line) and len(found) <= COMMON:
            votes.update(max(0, row - offset) for row in found)
    return [start for start, _ in votes.most_common(CANDIDATES)]


def _alike(a: str, b: str) -> float:
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b).quick_ratio()


def _cut(line: str) -> str:
    """What of a line is compared: its first characters, without the white space around."""
    return line[: LINE_CHARS * 4].strip()[:LINE_CHARS]


def _bare(line: str) -> str:
    """A line without any white space, first characters only: equal for two lines that
    differ only in white space (up to there)."""
    return "".join(line[: LINE_CHARS * 4].split())[:LINE_CHARS]


def _quoted(line: str) -> str:
    return repr(line if len(line) <= _SHOWN else line[:_SHOWN] + "…")
