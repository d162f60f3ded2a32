"""An answer with edit blocks as the transcript shows it: prose as Markdown, blocks as edits.

A SEARCH/REPLACE block is drawn as a small diff (its file, then the SEARCH lines in red with
`-` and the REPLACE lines in green with `+`, and what a lenient reading assumed), never through
Markdown, whose quote rules turned `>>>>>>> REPLACE` into seven nested quotes. A malformed block
is drawn as its literal text under a line that says what is wrong with it, so the user sees
what the model wrote and why F6 will not apply it.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Markdown, Static

from localspec.edits.parse import Edit
from localspec.edits.parts import Part


class EditParts(Vertical):
    """The parts of one answer, in order."""

    DEFAULT_CSS = """
    EditParts {
        height: auto;
    }
    EditParts .edit-block {
        margin: 1 0;
        background: $boost;
    }
    """


def parts_view(parts: Sequence[Part]) -> EditParts:
    return EditParts(*(_widget(part) for part in parts))


def _widget(part: Part) -> Widget:
    if part.kind == "text":
        return Markdown(part.text)
    if part.edit is not None:
        return Static(edit_text(part.edit), classes="edit-block", markup=False)
    return Static(malformed_text(part), classes="edit-block malformed", markup=False)


def edit_text(edit: Edit) -> Text:
    """A block as a diff: a header naming the file and the kind, `-` lines, `+` lines."""
    text = Text()
    text.append(f"{edit.path} · {edit.kind} (answer line {edit.line})\n", "bold")
    for line in (edit.search or "").splitlines():
        text.append(f"- {line}\n", "red")
    for line in edit.replace.splitlines():
        text.append(f"+ {line}\n", "green")
    for said in edit.assumed:
        text.append(f"assumed: {said}\n", "yellow")
    text.rstrip()
    return text


def malformed_text(part: Part) -> Text:
    """A block that cannot be applied: what is wrong, then its text exactly as written."""
    text = Text()
    text.append(f"not an edit F6 can apply: {part.problem}\n", "bold yellow")
    text.append(part.text)
    text.rstrip()
    return text
