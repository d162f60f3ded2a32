"""The conversation's settings: system prompt, speculation mode and draft length, sampling.

Values are checked by the engine's own settings classes when saved; an invalid one keeps the
screen open with the reason, so nothing out of range ever reaches a generation.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, TextArea

from localspec import SpecMode
from tui.settings import ChatSettings, SettingsError

_NUMBERS: tuple[tuple[str, str, Literal["integer", "number"]], ...] = (
    ("draft_max", "max draft length", "integer"),
    ("temperature", "temperature (0 = greedy)", "number"),
    ("top_p", "top-p", "number"),
    ("max_tokens", "max tokens per answer", "integer"),
)


class SettingsScreen(ModalScreen[ChatSettings | None]):
    """Edit one conversation's settings; dismisses with the new settings or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]

    def __init__(self, settings: ChatSettings, draft_available: bool) -> None:
        super().__init__()
        self.settings = settings
        self.draft_available = draft_available

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog settings"):
            yield Label("Conversation settings  (ctrl+s saves, escape cancels)")
            yield Label("system prompt")
            yield TextArea(self.settings.system, id="system", soft_wrap=True, compact=True)
            with Grid(id="fields"):
                yield Label("speculation")
                modes = [
                    (mode.value, mode)
                    for mode in SpecMode
                    if self.draft_available
                    or mode not in (SpecMode.DRAFT, SpecMode.HYBRID)
                    or mode is self.settings.spec_mode
                ]
                yield Select(
                    modes,
                    value=self.settings.spec_mode,
                    allow_blank=False,
                    id="spec_mode",
                    compact=True,
                )
                for key, label, kind in _NUMBERS:
                    yield Label(label)
                    yield Input(str(getattr(self.settings, key)), type=kind, id=key, compact=True)
            yield Label("", id="error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        values = {key: self.query_one(f"#{key}", Input).value for key, _, _ in _NUMBERS}
        values["system"] = self.query_one("#system", TextArea).text
        values["spec_mode"] = str(self.query_one("#spec_mode", Select).value)
        try:
            self.dismiss(ChatSettings.from_form(values))
        except SettingsError as exc:
            self.query_one("#error", Label).update(str(exc))
