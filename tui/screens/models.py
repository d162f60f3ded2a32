"""The model picker: the registry's pairs and models, with what is installed and what is not.

Choosing an entry that is not downloaded yet fetches it (with a progress bar on the chat
screen) before loading; the registry is read when the picker opens, so a user's own
models.toml entries appear without a restart.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tui.host import Choice


def _describe(choice: Choice, current: bool) -> str:
    missing = choice.missing
    if missing:
        size = sum(e.size or 0 for e in missing)
        state = f"download {size / 1e9:.1f} GB" if size else "download"
    else:
        state = "installed"
    kind = "pair" if choice.draft is not None else "model"
    marker = "* " if current else "  "
    return f"{marker}{choice.name}  [{kind}, {state}]  {choice.description}"


class ModelPicker(ModalScreen[Choice | None]):
    """Pick a pair (target + draft) or a single model; dismisses with the choice or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, choices: list[Choice], current: str) -> None:
        super().__init__()
        self.choices = choices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog models"):
            yield Label("Model pair  (enter loads it; missing files are downloaded first)")
            yield OptionList(
                *(
                    Option(_describe(c, c.name == self.current), id=str(i))
                    for i, c in enumerate(self.choices)
                ),
                markup=False,
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[event.option_index])
