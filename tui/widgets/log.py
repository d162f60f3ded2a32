"""The scrolling column of messages, which follows a streaming answer like `tail -f`.

It follows until the user scrolls up (to reread something) and follows again once they are
back at the bottom. Textual's own `anchor()` does this too, but it positions content that is
shorter than the view at the bottom and keeps stale offsets when a whole conversation is
mounted at once, so following is decided here from the direction of each scroll instead.
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.geometry import Size


class MessageLog(VerticalScroll):
    """Messages, oldest first; `follow_answer` keeps the newest line in view if following."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.following = True

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # only the user scrolls up: the app itself only ever scrolls to the end, and a clamp
        # (content that got shorter) leaves the view at the end
        if new_value < old_value and new_value < self.max_scroll_y:
            self.following = False
        elif new_value >= self.max_scroll_y:
            self.following = True

    def watch_virtual_size(self, old_size: Size, new_size: Size) -> None:
        """Markdown lays out a finished answer a frame or more after its last write, so the
        log keeps up with its height itself rather than trusting one scroll at the end."""
        if self.following and new_size.height > old_size.height:
            self.scroll_end(animate=False)

    def show_end(self) -> None:
        """Scroll to the newest message and follow from there (a new question, a switch)."""
        self.following = True
        self.scroll_end(animate=False)

    def follow_answer(self) -> None:
        """Keep up with an answer that just grew, unless the user has scrolled away."""
        if self.following:
            self.scroll_end(animate=False)
