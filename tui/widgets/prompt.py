"""The prompt box: a multi-line editor where Enter sends and Up walks back through prompts.

Terminals report Shift+Enter only with the kitty keyboard protocol, so Ctrl+J (a plain line
feed everywhere) inserts a new line too. Up and Down recall prompts only from the first and
last line, so they still move the cursor inside a multi-line prompt. A path being typed after
`@` or `/add` is completed under the working directory: the completion shows dimmed after the
cursor, and Tab or Right takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from tui.file_commands import complete_path, path_fragment


class PromptInput(TextArea):
    """Multi-line prompt with send-on-Enter and a history of earlier prompts."""

    @dataclass
    class Submitted(Message):
        text: str

    def __init__(self, *, id: str | None = None, root: Path | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.root = Path.cwd() if root is None else root  # where typed paths are completed
        self.prompts: list[str] = []
        # position in `history` while recalling; len(history) means "the draft being typed"
        self._recall = 0
        self._draft = ""

    def remember(self, prompts: list[str]) -> None:
        """Replace the history (a conversation's earlier prompts, oldest first)."""
        self.prompts = list(prompts)
        self._recall = len(self.prompts)

    def restore(self, text: str) -> None:
        """Put `text` back into the box with the cursor at its end (after a cancel)."""
        self.load_text(text)
        self.move_cursor(self.document.end)
        self._recall = len(self.prompts)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text
            if text.strip():
                self.prompts.append(text)
                self._recall = len(self.prompts)
                self.clear()
                self.post_message(self.Submitted(text))
            return
        if event.key == "tab" and self.suggestion:
            event.stop()
            event.prevent_default()
            self.insert(self.suggestion)
            return
        if event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)

    def action_cursor_up(self, select: bool = False) -> None:
        if select or not self.cursor_at_first_line or self._recall == 0:
            super().action_cursor_up(select)
            return
        if self._recall == len(self.prompts):
            self._draft = self.text
        self._recall -= 1
        self.load_text(self.prompts[self._recall])

    def action_cursor_down(self, select: bool = False) -> None:
        if select or not self.cursor_at_last_line or self._recall >= len(self.prompts):
            super().action_cursor_down(select)
            return
        self._recall += 1
        recalled = self.prompts[self._recall] if self._recall < len(self.prompts) else self._draft
        self.load_text(recalled)
        self.move_cursor(self.document.end)

    def update_suggestion(self) -> None:
        """Offer the rest of a path typed after `@` or `/add` (TextArea's hook after edits)."""
        row, column = self.cursor_location
        line = self.document.get_line(row)
        fragment = path_fragment(line[:column]) if line[column : column + 1].strip() == "" else None
        if fragment is None:
            self.suggestion = ""
            return
        self.suggestion = complete_path(self.root, fragment[0], mention=fragment[1])
