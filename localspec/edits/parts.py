"""An answer cut into what a reader sees: prose, SEARCH/REPLACE blocks, malformed blocks.

A transcript that renders an answer as Markdown alone shows an edit wrong: Markdown reads each
`>` of `>>>>>>> REPLACE` as a quote, seven deep. The chat app renders the prose parts as
Markdown and each block as what it is (an edit: its file, the lines it removes and adds; a
malformed block: its text as written, with what is wrong). The cut comes from the same `scan`
that F6 applies, so what the transcript shows as an edit is what F6 finds.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from localspec.edits.parse import Edit, lines_of, scan

PartKind = Literal["text", "edit", "malformed"]


@dataclass(frozen=True)
class Part:
    """A run of the answer's lines: `text` as written; an edit's block carries the `edit`,
    a malformed block the `problem`."""

    kind: PartKind
    text: str
    edit: Edit | None = None
    problem: str | None = None


def answer_parts(answer: str, added: Collection[str] = ()) -> list[Part]:
    """`answer` cut into parts, in order; their texts joined are the answer (white space
    between two blocks aside). Whole-file blocks stay in the prose: a fenced block is already
    shown as code."""
    lines = lines_of(answer)
    parts: list[Part] = []
    row = 0
    for block in scan(answer, added):
        if block.edit is not None and block.edit.search is None:
            continue  # a whole file: Markdown shows a code block right
        first = max(block.first, row)
        parts.extend(_prose(lines[row:first]))
        text = "".join(lines[first : block.end])
        if block.edit is not None:
            parts.append(Part("edit", text, block.edit))
        else:
            parts.append(Part("malformed", text, problem=block.problem))
        row = max(row, block.end)
    parts.extend(_prose(lines[row:]))
    return parts


def _prose(lines: list[str]) -> list[Part]:
    text = "".join(lines)
    return [Part("text", text)] if text.strip() else []
