"""Reading tool calls out of generated text, as it streams.

Qwen2.5 (trained on the Hermes format, which its chat template describes) writes a call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

after any text of its own, several calls one after another. `CallStream` turns the text into
`Content` (what is not a call), `CallOpened` (a call's id and function name, as soon as the name
is complete) and `CallArguments` (the arguments' JSON text, piece by piece), which is what an
OpenAI stream sends; `parse` reads a whole answer the same way, so a streamed answer and a
whole one cannot differ. The markup never reaches the content, and neither does whitespace
around a call (the newline Qwen writes between calls).

A call whose start does not read as `{"name": ..., "arguments": ...}` is held until its
`</tool_call>` and then read as JSON in any key order; one that does not parse even then is
given back as content, markup and all: the model wrote text, not a call.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:')


@dataclass(frozen=True)
class ToolCall:
    """One call: OpenAI's `id`, the function's `name` and its `arguments` as JSON text."""

    id: str
    name: str
    arguments: str

    def arguments_value(self) -> Any:
        """The arguments as data (what chat templates render); the text if it is not JSON."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class CallOpened:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class CallArguments:
    index: int
    text: str


Piece = Content | CallOpened | CallArguments


@dataclass
class _Value:
    """Where a JSON value being streamed ends: brackets and strings counted, nothing parsed."""

    depth: int = 0
    started: bool = False
    in_string: bool = False
    escaped: bool = False
    scalar: bool = False

    def step(self, char: str) -> tuple[bool, bool]:
        """(whether `char` is part of the value, whether the value is complete after it)."""
        if not self.started:
            if char.isspace():
                return False, False
            self.started = True
            if char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth = 1
            else:
                self.scalar = True
            return True, False
        if self.scalar:
            if char in ",}] \t\r\n":
                return False, True
            return True, False
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == '"':
                self.in_string = False
                return True, self.depth == 0
            return True, False
        if char == '"':
            self.in_string = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
            return True, self.depth == 0
        return True, False


@dataclass
class CallStream:
    """Feed generated text in any pieces; get the same `Piece`s' concatenation every time."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    _state: str = "text"  # text, head (after <tool_call>), arguments, tail (before </tool_call>)
    _buffer: str = ""
    _value: _Value = field(default_factory=_Value)
    _arguments: str = ""
    _after_call: bool = False

    def feed(self, text: str) -> list[Piece]:
        self._buffer += text
        pieces: list[Piece] = []
        while self._step(pieces):
            pass
        return _merged(pieces)

    def close(self) -> list[Piece]:
        """The end of the text: what was held back. A call cut off in its arguments stays a
        call (its arguments incomplete), one cut off before its name is content."""
        pieces: list[Piece] = []
        if self._state == "text":
            self._content(pieces, self._buffer.rstrip() if self.calls else self._buffer)
        elif self._state == "head":
            self._content(pieces, OPEN + self._buffer)
        else:
            if self._state == "arguments" and self._quoted:  # held back whole, sent as it is
                pieces.append(CallArguments(len(self.calls) - 1, self._arguments))
            self._finish_call()
        self._buffer = ""
        self._state = "text"
        return _merged(pieces)

    def _step(self, pieces: list[Piece]) -> bool:
        """Move through the buffer as far as it decides; False when more text is needed."""
        if self._state == "text":
            return self._text(pieces)
        if self._state == "head":
            return self._head(pieces)
        if self._state == "arguments":
            return self._argument_text(pieces)
        end = self._buffer.find(CLOSE)
        if end < 0:
            return False
        self._buffer = self._buffer[end + len(CLOSE) :]
        self._finish_call()
        return True

    def _text(self, pieces: list[Piece]) -> bool:
        if self._after_call:  # the whitespace after a call is the call's, not content
            self._buffer = self._buffer.lstrip()
            self._after_call = not self._buffer
        start = self._buffer.find(OPEN)
        if start >= 0:
            self._content(pieces, self._buffer[:start].rstrip())
            self._buffer = self._buffer[start + len(OPEN) :]
            self._state = "head"
            return True
        # hold back what may still become `<tool_call>`, and the whitespace a call may follow
        ready = self._buffer[: len(self._buffer) - _partial_suffix(self._buffer, OPEN)]
        sent = ready.rstrip()
        self._content(pieces, sent)
        self._buffer = self._buffer[len(sent) :]
        return False

    def _head(self, pieces: list[Piece]) -> bool:
        match = _HEAD.match(self._buffer)
        if match is not None:
            index = len(self.calls)
            call = ToolCall(new_call_id(), json.loads(match.group(1)), "")
            self.calls.append(call)
            pieces.append(CallOpened(index, call.id, call.name))
            self._buffer = self._buffer[match.end() :]
            self._state, self._value, self._arguments = "arguments", _Value(), ""
            return True
        end = self._buffer.find(CLOSE)
        if end < 0:
            return False
        body, self._buffer = self._buffer[:end], self._buffer[end + len(CLOSE) :]
        self._state = "text"
        whole = _whole_call(body)
        if whole is None:
            self._content(pieces, OPEN + body + CLOSE)
            return True
        index = len(self.calls)
        self.calls.append(whole)
        pieces += [CallOpened(index, whole.id, whole.name), CallArguments(index, whole.arguments)]
        self._after_call = True
        return True

    def _argument_text(self, pieces: list[Piece]) -> bool:
        taken = []
        for position, char in enumerate(self._buffer):
            part, done = self._value.step(char)
            if part:
                taken.append(char)
            if done:
                self._buffer = self._buffer[position + 1 if part else position :]
                self._state = "tail"
                break
        else:
            self._buffer = ""
        text = "".join(taken)
        self._arguments += text
        index = len(self.calls) - 1
        if not self._quoted:
            if text:
                pieces.append(CallArguments(index, text))
        elif self._state == "tail":  # arguments sent as a JSON string: its text, once whole
            self._arguments = _unquoted(self._arguments)
            pieces.append(CallArguments(index, self._arguments))
        return self._state == "tail"

    @property
    def _quoted(self) -> bool:
        return self._arguments.startswith('"')

    def _finish_call(self) -> None:
        last = self.calls[-1]
        self.calls[-1] = ToolCall(last.id, last.name, self._arguments)
        self._arguments = ""
        self._state = "text"
        self._after_call = True

    def _content(self, pieces: list[Piece], text: str) -> None:
        if text:
            self.content += text
            pieces.append(Content(text))


def _whole_call(body: str) -> ToolCall | None:
    """A call written another way (keys in another order, arguments as a JSON string)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(new_call_id(), value["name"], text)


def _unquoted(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, str) else text


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Neighbouring pieces of one kind (and one call) as one."""
    merged: list[Piece] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if isinstance(piece, Content) and isinstance(last, Content):
            merged[-1] = Content(last.text + piece.text)
        elif (
            isinstance(piece, CallArguments)
            and isinstance(last, CallArguments)
            and last.index == piece.index
        ):
            merged[-1] = CallArguments(piece.index, last.text + piece.text)
        else:
            merged.append(piece)
    return merged


def parse(text: str) -> CallStream:
    """A whole answer read as `CallStream` reads it streamed: `.content` and `.calls`."""
    stream = CallStream()
    stream.feed(text)
    stream.close()
    return stream
