"""The diff view: an answer's edits as a coloured unified diff, applied or discarded with a key.

It only shows and answers (True: apply); the chat screen plans the changes before and writes
them after, so that nothing is written from a screen that can be dismissed half way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static

from localspec.edits import FileChange, unified_diff

_STYLES = {"+": "green", "-": "red", "@": "cyan", "\\": "dim"}


def coloured(diff: str) -> Text:
    """A unified diff styled as git colours it: file headers bold, hunks cyan, lines added
    green and removed red."""
    text = Text()
    for line in diff.splitlines(keepends=True):
        if line.startswith(("--- ", "+++ ")):
            text.append(line, "bold")
        else:
            text.append(line, _STYLES.get(line[:1], ""))
    return text


def summary(changes: Sequence[FileChange]) -> str:
    """One line per file: its name and what happens to it."""
    lines = []
    for change in changes:
        if change.before is None:
            what = "new file"
        elif change.after is None:
            what = "removed"
        else:
            what = "changed"
        lines.append(f"{change.path}: {what}")
    return "\n".join(lines)


def assumed(changes: Sequence[FileChange]) -> str:
    """What lenient readings of the blocks took for granted, one line each ("" for none):
    the user applies them knowing it."""
    lines = [f"assumed: {line}" for change in changes for line in change.assumed]
    return "\n".join(lines)


class DiffScreen(ModalScreen[bool]):
    """The changes an answer's edits make; `stale` names the files that changed on disk since
    they were sent to the model (applying them asks once more)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a,enter", "decide(True)", "Apply"),
        Binding("d,escape", "decide(False)", "Discard"),
    ]
    DEFAULT_CSS = """
    DiffScreen .diff-view {
        width: 95%;
        max-width: 160;
        height: 90%;
    }
    DiffScreen #diff {
        height: 1fr;
        background: $boost;
    }
    DiffScreen #stale, DiffScreen #assumed {
        color: $warning;
    }
    """

    def __init__(self, changes: Sequence[FileChange], stale: Sequence[str] = ()) -> None:
        super().__init__()
        self.changes = list(changes)
        self.stale = list(stale)
        self.diff = unified_diff(self.changes)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog diff-view"):
            yield Label("Review edits  (a or enter: apply · d or escape: discard)")
            yield Label(summary(self.changes), id="files", markup=False)
            if self.stale:
                names = ", ".join(self.stale)
                warning = f"changed on disk since it was sent to the model: {names}"
                yield Label(warning, id="stale", markup=False)
            if assumed(self.changes):
                yield Label(assumed(self.changes), id="assumed", markup=False)
            with VerticalScroll(id="diff"):
                yield Static(coloured(self.diff), markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#diff").focus()

    def action_decide(self, apply: bool) -> None:
        self.dismiss(apply)
