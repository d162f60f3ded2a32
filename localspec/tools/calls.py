"""Reading tool calls out of generated text, as it streams.

Qwen2.5 (trained on the Hermes format, which its chat template describes) writes a call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

after any text of its own, several calls one after another. Small Qwen2.5 models (the 1.5B
Coder) often write the call as the bare JSON object instead, alone or in a ```json fence: an
answer that begins so is read as that one call, and so is a ```json fence after text (the 1.5B
sometimes echoes its tool list first), as llama.cpp's Hermes parser reads them. A fenced object
whose keys do not begin `"name": ..., "arguments":` (a package.json in an answer) is content
as soon as that shows.
`CallStream` turns the text into
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
from typing import Any, Literal

OPEN = "<tool_call>"
CLOSE = "</tool_call>"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SPACE = " \t\n"
FENCE = "```"


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
    # start (a JSON call may begin), text, head (after <tool_call>, or a JSON call's start),
    # arguments, tail (after them, before the call's end), fence (a JSON call's closing ```)
    _state: str = "start"
    _buffer: str = ""
    _value: _Value = field(default_factory=_Value)
    _arguments: str = ""
    _after_call: bool = False
    _markup: bool = True  # the call being read is in <tool_call> markup, not a JSON object
    _fenced: bool = False

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
        if self._state in ("start", "text"):
            self._content(pieces, self._buffer.rstrip() if self.calls else self._buffer)
        elif self._state == "head":
            self._content(pieces, (OPEN if self._markup else "") + self._buffer)
        elif self._state == "fence":
            pass
        else:
            if self._state == "arguments" and self._quoted:  # held back whole, sent as it is
                pieces.append(CallArguments(len(self.calls) - 1, self._arguments))
            self._finish_call()
        self._buffer = ""
        self._state = "text"
        return _merged(pieces)

    def _step(self, pieces: list[Piece]) -> bool:
        """Move through the buffer as far as it decides; False when more text is needed."""
        if self._state == "start":
            return self._start()
        if self._state == "text":
            return self._text(pieces)
        if self._state == "head":
            return self._head(pieces)
        if self._state == "arguments":
            return self._argument_text(pieces)
        if self._state == "fence":
            return self._fence()
        closer = CLOSE if self._markup else "}"
        end = self._buffer.find(closer)
        if end < 0:
            return False
        self._buffer = self._buffer[end + len(closer) :]
        fenced = self._fenced
        self._finish_call()
        if fenced:
            self._state = "fence"
        return True

    def _start(self) -> bool:
        """The answer's start: a call written as a JSON object (what small Qwen2.5 models
        write instead of markup), alone or in a ```json fence, or text."""
        opening = _json_opening(self._buffer, fence=True)
        if opening is None:
            return False
        self._state, self._markup = ("head", False) if opening else ("text", True)
        return True

    def _fence(self) -> bool:
        """After a fenced JSON call: its closing ```."""
        rest = self._buffer.lstrip(_SPACE)
        if len(rest) < len(FENCE) and FENCE.startswith(rest):
            return False
        self._buffer = rest.removeprefix(FENCE)
        self._state = "text"
        return True

    def _text(self, pieces: list[Piece]) -> bool:
        if self._after_call:  # the whitespace after a call is the call's, not content
            self._buffer = self._buffer.lstrip()
            self._after_call = not self._buffer
        scanned = 0
        while True:
            start, fence = self._buffer.find(OPEN, scanned), self._buffer.find(FENCE, scanned)
            if start >= 0 and not 0 <= fence < start:
                self._send_before(pieces, start)
                self._buffer = self._buffer[self._buffer.find(OPEN) + len(OPEN) :]
                self._state, self._markup = "head", True
                return True
            if fence < 0:
                break
            opening = _json_opening(self._buffer[fence:], fence=True)
            if opening is not False:  # a fenced call, or what may still become one
                self._send_before(pieces, fence)
                if opening is None:
                    return False
                self._state, self._markup = "head", False
                return True
            scanned = fence + len(FENCE)
        # hold back what may still become `<tool_call>` or a fence, and the whitespace a call
        # may follow
        held = max(_partial_suffix(self._buffer, OPEN), _partial_suffix(self._buffer, FENCE))
        self._send_before(pieces, len(self._buffer) - held)
        return False

    def _send_before(self, pieces: list[Piece], end: int) -> None:
        """The text before `end` as content, less the whitespace a call there would own."""
        sent = self._buffer[:end].rstrip()
        self._content(pieces, sent)
        self._buffer = self._buffer[len(sent) :]

    def _head(self, pieces: list[Piece]) -> bool:
        opening = _json_opening(self._buffer, fence=not self._markup)
        head = _call_head(self._buffer, opening[0]) if opening else opening
        if opening and head:
            index = len(self.calls)
            call = ToolCall(new_call_id(), head[0], "")
            self.calls.append(call)
            pieces.append(CallOpened(index, call.id, call.name))
            self._fenced = opening[1]
            self._buffer = self._buffer[head[1] :]
            self._state, self._value, self._arguments = "arguments", _Value(), ""
            return True
        if not self._markup:  # a JSON object: a call once its head reads as one, else text
            if head is None:
                return False
            end = opening[0] if opening else len(self._buffer)
            self._content(pieces, self._buffer[:end])
            self._buffer, self._state = self._buffer[end:], "text"
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
        self._state, self._markup, self._fenced = "text", True, False
        self._after_call = True

    def _content(self, pieces: list[Piece], text: str) -> None:
        if text:
            self.content += text
            pieces.append(Content(text))


def _json_opening(text: str, *, fence: bool) -> tuple[int, bool] | Literal[False] | None:
    """Whether `text` opens a call object, `{"name":` (after a ```json fence if `fence`):
    where its name starts and whether it is fenced once it does, None while it still may,
    False once it cannot."""
    at = _skip(text, 0)
    fenced = fence and text.startswith("`", at)
    head = [("{", False), ('"name"', False), (":", False)]
    at_name = _literals(text, at, [(FENCE, False), ("json", True), *head] if fenced else head)
    return at_name if at_name is None or at_name is False else (at_name, fenced)


def _call_head(text: str, at: int) -> tuple[str, int] | Literal[False] | None:
    """The function's name from `at` and where the arguments start, once `"...", "arguments":`
    is whole; None while it may still be, False once it cannot."""
    name = _STRING.match(text, at)
    if name is None:
        return None if at == len(text) or text.startswith('"', at) else False
    steps = [(",", False), ('"arguments"', False), (":", False)]
    end = _literals(text, _skip(text, name.end()), steps)
    if end is None or end is False:
        return end
    return str(json.loads(name.group())), end


def _literals(text: str, at: int, steps: list[tuple[str, bool]]) -> int | Literal[False] | None:
    """Where `text` goes on after `steps` (literals, optional or not, whitespace between)
    from `at`: None while it may still, False once it cannot. The last must be whole."""
    for number, (literal, optional) in enumerate(steps):
        part = text[at : at + len(literal)]
        if part != literal:
            if at + len(part) == len(text) and literal.startswith(part):
                return None  # `part` is shorter: the text ends in the literal's start
            if optional:
                continue
            return False
        at = _skip(text, at + len(literal))
        if at == len(text) and number < len(steps) - 1:
            return None
    return at


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


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
