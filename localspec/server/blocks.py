"""A streamed answer as a sequence of blocks: text, and one block per tool call.

Anthropic's Messages API streams `content` blocks (`text`, `tool_use`) and OpenAI's Responses
API streams `output` items (`message`, `function_call`); both open a block, send its deltas
and close it before the next one opens. `Blocks` reads the generated text with the same
`CallStream` the chat completions endpoint uses, so all three APIs find the same calls in the
same text, and says when each block opens, grows and closes; each API only names the events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from localspec.tools.calls import CallArguments, CallOpened, CallStream, Content, Piece

BlockKind = Literal["text", "call"]


@dataclass(frozen=True)
class Opened:
    """Block `index` opens: text, or a call (its id and function name)."""

    index: int
    kind: BlockKind
    call: CallOpened | None = None


@dataclass(frozen=True)
class Delta:
    """More of block `index`: text, or a piece of the call's arguments' JSON text."""

    index: int
    kind: BlockKind
    text: str


@dataclass(frozen=True)
class Closed:
    """Block `index` is complete; `text` is all its deltas together."""

    index: int
    kind: BlockKind
    text: str
    call: CallOpened | None = None


BlockEvent = Opened | Delta | Closed


class Blocks:
    """Feed an answer's text as it streams; get its blocks' events. Without `calls` (no tools,
    or `tool_choice` none) all of it is text, markup and all, as the model wrote it."""

    def __init__(self, *, calls: bool) -> None:
        self._calls = CallStream() if calls else None
        self._open: Opened | None = None
        self._text = ""
        self.count = 0
        self.called = False

    def feed(self, text: str) -> list[BlockEvent]:
        pieces: list[Piece] = self._calls.feed(text) if self._calls else [Content(text)]
        return self._events(pieces)

    def close(self, *, at_least_one: bool = True) -> list[BlockEvent]:
        """The end of the answer: what the call reader held back, and the last block's end.
        `at_least_one`: an answer with no block gets an empty text block (both APIs always
        send one)."""
        events = self._events(self._calls.close()) if self._calls else []
        if at_least_one and self.count == 0:
            events.append(self._start("text"))
        events.extend(self._finish())
        return events

    def _events(self, pieces: list[Piece]) -> list[BlockEvent]:
        events: list[BlockEvent] = []
        for piece in pieces:
            if isinstance(piece, CallOpened):
                self.called = True
                events.extend(self._finish())
                events.append(self._start("call", piece))
            elif isinstance(piece, Content) and piece.text:
                if self._open is None or self._open.kind != "text":
                    events.extend(self._finish())
                    events.append(self._start("text"))
                events.append(self._delta("text", piece.text))
            elif isinstance(piece, CallArguments) and piece.text:
                events.append(self._delta("call", piece.text))
        return events

    def _start(self, kind: BlockKind, call: CallOpened | None = None) -> Opened:
        self._open = Opened(self.count, kind, call)
        self._text = ""
        self.count += 1
        return self._open

    def _delta(self, kind: BlockKind, text: str) -> Delta:
        assert self._open is not None
        self._text += text
        return Delta(self._open.index, kind, text)

    def _finish(self) -> list[BlockEvent]:
        if self._open is None:
            return []
        opened, self._open = self._open, None
        return [Closed(opened.index, opened.kind, self._text, opened.call)]
