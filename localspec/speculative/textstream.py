"""Turning accepted tokens into streamed text, and ending the stream at a stop string.

llama.cpp hands out each token's piece as bytes, and neither a UTF-8 character nor a stop string
respects token boundaries. This module owns both problems, with no model and no I/O:

* `TextAssembler` decodes pieces incrementally, holding an incomplete character until its last
  byte arrives.
* `StopMatcher` never emits text that may still turn out to be part of a stop string, and cuts
  the stream before the stop string once one is certain.
* `TokenTextStream` chains the two; a generation loop calls it once per accepted token.

The stop rule, chosen so that the emitted text does not depend on how the text was split into
tokens: the output is the text before the earliest *start* of any stop string in the whole
generated text. A stop string that completes while an earlier-starting one is still possible
does not end the stream yet: with stops ["abcd", "bc"], "abc" is held back, "abcd" then ends it
with nothing emitted while "abce" ends it at "bc" after emitting "a". Stops that start at the
same position emit the same text, so the stream ends as soon as one of them completes instead
of spending another token to see whether a longer one would; `matched` is then the longest one
that was complete at that moment.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from localspec.errors import InvalidSettingsError


@dataclass(frozen=True)
class StopLimits:
    """How many stop strings a server accepts in one request (OpenAI takes 4), and how long
    the longest may be (editors send a line or two): the matcher holds back text as long as
    the longest and searches it for each one at every token (`serve --max-stops`,
    `--max-stop-length`)."""

    max_stops: int = 64
    max_length: int = 4096


class TextAssembler:
    """Incremental UTF-8 decoding of token pieces.

    A character may be split across tokens (byte-level BPE splits emoji and accented letters),
    so a piece alone is not always valid UTF-8. Bytes that can never be valid become U+FFFD
    rather than aborting a generation the user is watching.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        """Text completed by `piece`; a trailing incomplete character waits for the next one."""
        return self._decoder.decode(piece, final=False)

    def flush(self) -> str:
        """What is left at the end of generation: an unfinished character becomes U+FFFD."""
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Streaming stop-string detection that works across push boundaries.

    Only the held-back tail plus the newly pushed text is searched: every emitted position has
    already been proven not to start a stop string, and the tail always begins with a proper
    prefix of a stop string, so it is shorter than the longest one.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(stop == "" for stop in stops):
            raise InvalidSettingsError(
                "a stop string is empty, which would end every generation before its first "
                "token: remove the empty stop string"
            )
        self._stops = tuple(dict.fromkeys(stops))
        self._partial = [_PartialMatch(stop) for stop in self._stops]
        self._held = ""
        self.matched: str | None = None

    @property
    def stopped(self) -> bool:
        """True once a stop string has ended the stream; later text is discarded."""
        return self.matched is not None

    def push(self, text: str) -> tuple[str, bool]:
        """Add generated text; return the text now safe to emit and whether the stream stopped."""
        if self.stopped:
            return "", True
        buf = self._held + text
        for partial in self._partial:
            partial.feed(text)
        match = self._earliest_match(buf)
        live = self._earliest_live_start(buf)
        if match is not None and (live is None or live >= match[0]):
            return self._stop(buf, match)
        cut = len(buf) if live is None else live
        self._held = buf[cut:]
        return buf[:cut], False

    def flush(self) -> str:
        """Release the held-back text at the end of generation.

        A stop string that completed behind a longer candidate that never finished still ends
        the text here, so `matched` is worth checking after a flush too.
        """
        if self.stopped:
            return ""
        buf, self._held = self._held, ""
        match = self._earliest_match(buf)
        if match is not None:
            return self._stop(buf, match)[0]
        return buf

    def _stop(self, buf: str, match: tuple[int, str]) -> tuple[str, bool]:
        start, self.matched = match
        self._held = ""
        return buf[:start], True

    def _earliest_match(self, buf: str) -> tuple[int, str] | None:
        """The earliest complete stop string in `buf`; at equal starts the longer one."""
        best: tuple[int, str] | None = None
        for stop in self._stops:
            start = buf.find(stop)
            if start < 0:
                continue
            if best is None or start < best[0] or (start == best[0] and len(stop) > len(best[1])):
                best = (start, stop)
        return best

    def _earliest_live_start(self, buf: str) -> int | None:
        """Where the longest suffix of `buf` that may still grow into a stop string begins."""
        longest = max((partial.length for partial in self._partial), default=0)
        return len(buf) - longest if longest else None


class _PartialMatch:
    """How much of one stop string the text seen so far ends with: the longest suffix of the
    text that is a proper prefix of `stop`, kept by Knuth-Morris-Pratt's failure table.

    Memory is linear in the stop string's length and work linear in the text fed; a set of
    every prefix (the obvious way) grows with the square of the length: 1 MB of stop string
    was 24 GB of prefixes.
    """

    def __init__(self, stop: str) -> None:
        self.stop = stop
        # border[i]: the longest proper prefix of stop[:i] that is also its suffix
        self._border = [0] * (len(stop) + 1)
        k = 0
        for i in range(1, len(stop)):
            while k and stop[i] != stop[k]:
                k = self._border[k]
            if stop[i] == stop[k]:
                k += 1
            self._border[i + 1] = k
        self.length = 0

    def feed(self, text: str) -> None:
        stop, border, k = self.stop, self._border, self.length
        for char in text:
            while k and char != stop[k]:
                k = border[k]
            if char == stop[k]:
                k += 1
            if k == len(stop):  # a whole stop string: `_earliest_match` finds it
                k = border[k]
        self.length = k


class TokenTextStream:
    """Token pieces in, emitted text out, ending at the first stop string.

    This is the one object a generation loop needs per generation: push each accepted token's
    piece, stop generating when it reports stopped, and flush once at the end.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._assembler = TextAssembler()
        self._matcher = StopMatcher(stops)
        self._emitted: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far (never including a stop string or anything after it)."""
        return "".join(self._emitted)

    @property
    def matched(self) -> str | None:
        """The stop string that ended the stream, if one did."""
        return self._matcher.matched

    @property
    def stopped(self) -> bool:
        """True once a stop string has ended the stream."""
        return self._matcher.stopped

    def push(self, piece: bytes) -> tuple[str, bool]:
        """Add one token's piece; return the text now safe to emit and whether to stop."""
        if self._matcher.stopped:
            return "", True
        out, stopped = self._matcher.push(self._assembler.feed(piece))
        self._emitted.append(out)
        return out, stopped

    def flush(self) -> str:
        """Release everything still held back at the end of generation."""
        if self._matcher.stopped:
            return ""
        out, stopped = self._matcher.push(self._assembler.flush())
        if not stopped:
            out += self._matcher.flush()
        self._emitted.append(out)
        return out
