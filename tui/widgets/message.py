"""One message of the conversation: rendered Markdown, streamed in as the answer grows.

Answers stream through Textual's `MarkdownStream`, which appends to the parsed document and
batches fragments when tokens outrun the renderer, instead of re-rendering the whole answer
per token. Beside the Markdown each answer keeps a plain-text twin in which the text of target
steps that accepted draft tokens is highlighted; the app's draft toggle swaps the two, so a
user can see where speculation helped. The twin is kept current only while it is shown, and
grows piece by piece (rebuilding it per batch made a long answer's streaming ever dearer).

A finished answer that holds edit blocks is shown in parts (`tui.widgets.edit_blocks`): prose
as Markdown, each block as an edit or, malformed, as its literal text. While it streams it is
Markdown alone: a block is only known to be one once it is whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from localspec.edits.parts import answer_parts
from tui.store import Span, Status
from tui.widgets.edit_blocks import EditParts, parts_view

# background of text from steps where a draft was accepted, by proposer
DRAFT_STYLES = {"ngram": "on #1f4d2b", "draft": "on #1f3a5f"}
_STATUS_NOTES = {
    "complete": "",
    "streaming": "",
    "cancelled": " · cancelled",
    "interrupted": " · interrupted (the app stopped while answering)",
}
CONTEXT_FULL_NOTE = " · cut short: the context window is full"


def highlighted(content: str, spans: Sequence[Span]) -> Text:
    """`content` with each span styled by whether its step accepted draft tokens.

    A span is one target step's text; the engine reports how many of its tokens came from an
    accepted draft (all but the target's own last token at best), so the whole step is marked.
    """
    text = Text()
    position = extend_highlighted(text, content, 0, spans)
    text.append(content[position:])
    return text


def extend_highlighted(text: Text, content: str, position: int, spans: Sequence[Span]) -> int:
    """Append to `text` the pieces of `content` that `spans` cover from `position` on; returns
    where they end. A streaming answer grows its highlighting this way, piece by piece."""
    for length, source, from_draft in spans:
        piece = content[position : position + length]
        text.append(piece, DRAFT_STYLES.get(source, "") if from_draft else "")
        position += length
    return position


def _no_files() -> Sequence[str]:
    return ()


class MessageView(Vertical):
    """A user or assistant message with a role header and a status note.

    `context_full`: the answer ended because it filled the context window (the engine's
    finish reason "context"); it is complete as far as the model is concerned, but cut short.
    `context` gives the conversation's files when asked: a block that names no file is for
    the only one there, as F6 reads it.
    """

    def __init__(
        self,
        role: str,
        content: str = "",
        status: Status = "complete",
        spans: list[Span] | None = None,
        message_id: int | None = None,
        *,
        context_full: bool = False,
        context: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self.content = content
        self.status: Status = status
        self.spans: list[Span] = list(spans or [])
        self.message_id = message_id
        self.context_full = context_full
        self.context = context or _no_files
        self._stream: MarkdownStream | None = None
        # the highlighted twin while it is kept current, and the end of the text it covers;
        # None while hidden: it is rebuilt once when shown
        self._drafts: Text | None = None
        self._drafts_end = 0

    def compose(self) -> ComposeResult:
        yield Label(self._header(), classes="role")
        parts = self._parts() if self.status != "streaming" else None
        yield parts or Markdown(self.content or None)
        if self.role == "assistant":
            yield Static(self._rebuilt_drafts(), classes="drafts")

    def _header(self) -> str:
        name = "You" if self.role == "user" else "Assistant"
        cut = CONTEXT_FULL_NOTE if self.context_full and self.status == "complete" else ""
        return name + _STATUS_NOTES[self.status] + cut

    def set_status(self, status: Status) -> None:
        self.status = status
        self.query_one(".role", Label).update(self._header())
        stopped = status in ("cancelled", "interrupted") or self.context_full
        self.set_class(stopped, "stopped")

    def on_mount(self) -> None:
        self.set_status(self.status)

    async def append(self, text: str, spans: Sequence[Span]) -> None:
        """Add the text of target steps, one span each: one Markdown write (it grows without a
        full re-render), and the highlighted twin extended only while it is shown."""
        if self._stream is None:
            self._stream = Markdown.get_stream(self.query_one(Markdown))
        self.content += text
        self.spans.extend(spans)
        await self._stream.write(text)
        drafts = self.query_one(".drafts", Static)
        if not drafts.display:
            self._drafts = None
        elif self._drafts is None:
            drafts.update(self._rebuilt_drafts())
        else:
            self._drafts_end = extend_highlighted(
                self._drafts, self.content, self._drafts_end, spans
            )
            drafts.update(self._drafts)

    def _parts(self) -> EditParts | None:
        """The answer in parts when it holds an edit block (None: Markdown alone is right)."""
        if self.role != "assistant":
            return None
        parts = answer_parts(self.content, self.context())
        return parts_view(parts) if any(part.kind != "text" for part in parts) else None

    def _rebuilt_drafts(self) -> Text:
        self._drafts = highlighted(self.content, self.spans)
        self._drafts_end = sum(length for length, _, _ in self.spans)
        return self._drafts

    async def finish(self, status: Status) -> None:
        """End the stream (flushing what it batched) and show how the answer ended."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        parts = self._parts()
        if parts is not None and not self.query(EditParts):
            await self.query_one(Markdown).remove()
            await self.mount(parts, after=self.query_one(".role"))
        self.query_one(".drafts", Static).update(self._rebuilt_drafts())
        self.set_status(status)

    def refresh_drafts(self) -> None:
        """Re-render the highlighted twin (it is only kept current while visible)."""
        if self.role == "assistant":
            self.query_one(".drafts", Static).update(self._rebuilt_drafts())
