"""Small modal screens: the key-binding help, a yes/no question, a one-line text field."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label


class HelpScreen(ModalScreen[None]):
    """Every key binding, listed from the bindings themselves so it cannot go stale."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Keys  (ctrl+p opens the command palette with every action)")
            table: DataTable[str] = DataTable(show_cursor=False, zebra_stripes=True)
            table.add_columns("key", "action")
            table.add_rows(self.keys)
            yield table
            yield Button("Close", id="close", compact=True)

    def on_button_pressed(self) -> None:
        self.dismiss()


class ConfirmScreen(ModalScreen[bool]):
    """A question answered with y/n or the buttons."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Yes", variant="error", id="yes", compact=True)
                yield Button("No", id="no", compact=True)

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TextScreen(ModalScreen[str | None]):
    """One line of text (a title, a file name); Escape gives None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, value: str) -> None:
        super().__init__()
        self.title_text = title
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, markup=False)
            yield Input(self.value, select_on_focus=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)
