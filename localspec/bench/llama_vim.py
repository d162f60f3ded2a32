"""llama.vim's rules, as its source has them: what it sends to `/infill`, and when.

Implemented from llama.vim's `autoload/llama.vim` (ggml-org/llama.vim at a1c8e6e, default
configuration): the ring buffer of extra chunks (`pick_chunk`, its dedup and the eviction of
similar chunks, the queue that `ring_update` moves into the ring once a second in normal mode,
each move sending an `n_predict: 0` warm-up with the new `input_extra`), the local context
(`fim_ctx_local`: `n_prefix` lines before the cursor, the current line up to the cursor as
`prompt`, `n_suffix` lines after), the completion cache keyed by that context (a suggestion is
shown from it when the user types into a cached one), and the speculative request llama.vim
sends as soon as a suggestion is shown: the completion of the text as if the suggestion were
accepted, so that accepting shows the next one at once.

The server's answers are stood in for by the file as opened (`Buffer.original`): an answer is
the rest of the original line up to which the user has retyped it, so the requests depend only
on the user's actions, and two servers replay exactly the same list.
"""

from __future__ import annotations

import random
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

FIM = "fim"
SPECULATIVE = "fim-speculative"
WARMUP = "warmup"
KINDS = (FIM, SPECULATIVE, WARMUP)

_QUEUE_MAX = 16  # llama.vim's hard-coded queue length
_CACHE_KEY_SEP = "Î"  # what llama.vim hashes between the text before and after the cursor
_NON_WORD = re.compile(r"[^0-9A-Za-z_]+")  # Vim's \W
_BLANK = re.compile(r"[ \t]*")
_RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]


@dataclass(frozen=True)
class VimConfig:
    """llama.vim's `g:llama_config` defaults, the ones its requests depend on."""

    n_prefix: int = 256
    n_suffix: int = 64
    n_predict: int = 128
    t_max_prompt_ms: int = 500
    t_max_predict_ms: int = 1000
    max_line_suffix: int = 8
    max_cache_keys: int = 250
    ring_n_chunks: int = 16
    ring_chunk_size: int = 64
    ring_scope: int = 1024


@dataclass(frozen=True)
class EditorRequest:
    """One request as llama.vim sends it to `/infill`; `event` is what the user did."""

    kind: str
    event: str
    body: dict[str, Any]


def chunk_sim(c0: Sequence[str], c1: Sequence[str]) -> float:
    """llama.vim's similarity of two chunks: the share of c1's words found in c0 (0 to 1)."""
    words0 = [w for w in _NON_WORD.split("\n".join(c0)) if w]
    words1 = [w for w in _NON_WORD.split("\n".join(c1)) if w]
    if not words0 and not words1:
        return 1.0
    set0 = set(words0)
    common = sum(1 for word in words1 if word in set0)
    return 2.0 * common / (len(words0) + len(words1))


@dataclass(frozen=True)
class Chunk:
    data: tuple[str, ...]
    filename: str

    @property
    def text(self) -> str:
        return "\n".join(self.data) + "\n"


class Ring:
    """llama.vim's extra context: the chunks sent (`chunks`) and those waiting (`queued`)."""

    def __init__(self, config: VimConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.chunks: list[Chunk] = []
        self.queued: list[Chunk] = []
        self.n_evict = 0

    def random_span(self, text: Sequence[str]) -> tuple[str, ...]:
        """Half a chunk's worth of lines at a random place (Vim's inclusive slice: one more)."""
        half = self.config.ring_chunk_size // 2
        l0 = self.rng.randint(0, max(0, len(text) - half))
        l1 = min(l0 + half, len(text))
        return tuple(text[l0 : l1 + 1])

    def pick(self, text: Sequence[str], filename: str, *, do_evict: bool) -> None:
        """`s:pick_chunk`: queue a chunk of `text`, dropping (or deferring to) similar ones."""
        if self.config.ring_n_chunks <= 0 or len(text) < 3:
            return
        chunk = tuple(text) if len(text) + 1 < self.config.ring_chunk_size else None
        data = chunk if chunk is not None else self.random_span(text)
        if any(c.data == data for c in self.chunks + self.queued):
            return
        for pool in (self.queued, self.chunks):
            for i in range(len(pool) - 1, -1, -1):
                if chunk_sim(pool[i].data, data) > 0.9:
                    if not do_evict:
                        return
                    del pool[i]
                    self.n_evict += 1
        if len(self.queued) == _QUEUE_MAX:
            del self.queued[0]
        self.queued.append(Chunk(data, filename))

    def evict_near(self, text: Sequence[str]) -> None:
        """Before a completion: drop ring chunks like the text around the cursor (they make
        the model repeat what is already there)."""
        near = self.random_span(text)
        for i in range(len(self.chunks) - 1, -1, -1):
            if chunk_sim(self.chunks[i].data, near) > 0.5:
                del self.chunks[i]
                self.n_evict += 1

    def update(self) -> bool:
        """`s:ring_update`: move the oldest queued chunk into the ring; True if one moved."""
        if not self.queued:
            return False
        if len(self.chunks) == self.config.ring_n_chunks:
            del self.chunks[0]
        self.chunks.append(self.queued.pop(0))
        return True

    def extra(self) -> list[dict[str, str]]:
        # llama.vim also sends each chunk's `time` (Vim's reltime()); servers ignore it
        return [{"text": c.text, "filename": c.filename} for c in self.chunks]


@dataclass
class Buffer:
    """A file open in the editor; `original` is the file as opened (the stand-in answers)."""

    filename: str
    lines: list[str]
    original: list[str]
    saved: list[str]
    cursor: tuple[int, int] = (1, 0)  # (line from 1, column from 0), as llama.vim counts

    @classmethod
    def open(cls, filename: str, text: str) -> Buffer:
        lines = text.split("\n")
        return cls(filename, list(lines), list(lines), list(lines))

    @property
    def modified(self) -> bool:
        return self.lines != self.saved

    def getline(self, start: int, end: int) -> list[str]:
        """Vim's getline(start, end): lines start..end inclusive, from 1."""
        return self.lines[max(start, 1) - 1 : max(end, 0)]

    def around_cursor(self, half: int) -> list[str]:
        y = self.cursor[0]
        return self.getline(max(1, y - half), min(y + half, len(self.lines)))


@dataclass(frozen=True)
class Local:
    prefix: str
    middle: str
    suffix: str
    indent: int
    line_cur_suffix: str

    @property
    def key(self) -> str:
        return self.prefix + self.middle + _CACHE_KEY_SEP + self.suffix


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def local_context(
    buf: Buffer, x: int, y: int, *, prev: Sequence[str], config: VimConfig, indent_last: int
) -> Local:
    """`s:fim_ctx_local`: the text around (x, y), or as if `prev` were inserted there."""
    lines_suffix = buf.getline(y + 1, min(len(buf.lines), y + config.n_suffix))
    if not prev:
        line = buf.lines[y - 1]
        lines_prefix = buf.getline(max(1, y - config.n_prefix), y - 1)
        if _BLANK.fullmatch(line):
            cur_prefix, cur_suffix, indent = "", "", 0
        else:
            cur_prefix, cur_suffix, indent = line[:x], line[x:], indent_of(line)
    else:
        line = buf.lines[y - 1] + prev[0] if len(prev) == 1 else prev[-1]
        cur_prefix, cur_suffix, indent = line, "", indent_last
        lines_prefix = buf.getline(max(1, y - config.n_prefix + len(prev) - 1), y - 1)
        if len(prev) > 1:
            lines_prefix += [buf.lines[y - 1] + prev[0], *prev[1:-1]]
    return Local(
        prefix="\n".join(lines_prefix) + "\n",
        middle=cur_prefix,
        suffix=cur_suffix + "\n" + "\n".join(lines_suffix) + "\n",
        indent=indent,
        line_cur_suffix=cur_suffix,
    )


@dataclass
class Hint:
    """The suggestion on screen (`s:fim_data`)."""

    x: int
    y: int
    line_cur: str
    content: list[str]
    can_accept: bool


@dataclass
class Vim:
    """llama.vim's state for one editor session, sending requests as the user acts."""

    config: VimConfig
    rng: random.Random
    ring: Ring = field(init=False)
    cache: OrderedDict[str, str] = field(default_factory=OrderedDict)
    indent_last: int = -1
    pos_y_pick: int = -9999
    hint: Hint | None = None

    def __post_init__(self) -> None:
        self.ring = Ring(self.config, self.rng)

    def tick(self, seconds: int) -> Iterator[EditorRequest]:
        """Seconds in normal mode: `ring_update` runs once a second."""
        for _ in range(seconds):
            if self.ring.update():
                yield EditorRequest(WARMUP, "pause", self._warmup_body())

    def _warmup_body(self) -> dict[str, Any]:
        return {
            "id_slot": 0,
            "input_prefix": "",
            "input_suffix": "",
            "input_extra": self.ring.extra(),
            "prompt": "",
            "n_predict": 0,
            "temperature": 0.0,
            "samplers": [],
            "stream": False,
            "cache_prompt": True,
            "t_max_prompt_ms": 1,
            "t_max_predict_ms": 1,
            "response_fields": [""],
        }

    def cursor_moved_insert(self, buf: Buffer, event: str) -> Iterator[EditorRequest]:
        """CursorMovedI: `s:on_move` (hide, then a hint from the cache), then `llama#fim`."""
        x, y = buf.cursor[1], buf.cursor[0]
        self.hint = None
        yield from self._try_hint(buf, event)
        yield from self._fim(buf, x, y, (), event)

    def _cache_get(self, key: str) -> str | None:
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        return None

    def _cache_insert(self, key: str, content: str) -> None:
        if key not in self.cache and len(self.cache) > self.config.max_cache_keys - 1:
            self.cache.popitem(last=False)
        self.cache[key] = content
        self.cache.move_to_end(key)

    def _fim(
        self, buf: Buffer, x: int, y: int, prev: Sequence[str], event: str
    ) -> Iterator[EditorRequest]:
        """`llama#fim` (auto, with the cache): send a completion request unless cached."""
        local = local_context(
            buf, x, y, prev=prev, config=self.config, indent_last=self.indent_last
        )
        if len(local.line_cur_suffix) > self.config.max_line_suffix:
            return
        keys = [local.key]
        trimmed = local.prefix
        for _ in range(3):  # the context scrolled by a few lines finds the same completion
            trimmed = trimmed.split("\n", 1)[1] if "\n" in trimmed else ""
            if not trimmed:
                break
            keys.append(trimmed + local.middle + _CACHE_KEY_SEP + local.suffix)
        if any(self._cache_get(key) is not None for key in keys):
            return
        self.indent_last = local.indent
        self.ring.evict_near(buf.around_cursor(self.config.ring_chunk_size // 2))
        yield EditorRequest(SPECULATIVE if prev else FIM, event, self._fim_body(local, prev))
        if abs(y - self.pos_y_pick) > 32:  # the cursor moved a lot: gather chunks nearby
            self._pick_around(buf, y)
        answer = _stand_in_answer(buf, y + max(len(prev), 1) - 1, local.middle)
        for key in keys:
            self._cache_insert(key, answer)
        if self.hint is None or not self.hint.can_accept:
            yield from self._try_hint(buf, event)

    def _fim_body(self, local: Local, prev: Sequence[str]) -> dict[str, Any]:
        return {
            "id_slot": 0,
            "input_prefix": local.prefix,
            "input_suffix": local.suffix,
            "input_extra": self.ring.extra(),
            "prompt": local.middle,
            "n_predict": self.config.n_predict,
            "stop": [],
            "n_indent": local.indent,
            "top_k": 40,
            "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"],
            "stream": False,
            "cache_prompt": True,
            "t_max_prompt_ms": self.config.t_max_prompt_ms,
            # the first request is quick: the speculative one follows once it is shown
            "t_max_predict_ms": self.config.t_max_predict_ms if prev else 250,
            "response_fields": list(_RESPONSE_FIELDS),
        }

    def _pick_around(self, buf: Buffer, y: int) -> None:
        config, last = self.config, len(buf.lines)
        before = buf.getline(max(1, y - config.ring_scope), max(1, y - config.n_prefix))
        self.ring.pick(before, buf.filename, do_evict=False)
        start = min(last, y + config.n_suffix)
        after = buf.getline(start, min(last, start + config.ring_chunk_size))
        self.ring.pick(after, buf.filename, do_evict=False)
        self.pos_y_pick = y

    def _try_hint(self, buf: Buffer, event: str) -> Iterator[EditorRequest]:
        """`s:fim_try_hint`: show a cached completion for the cursor, or one typed into (up
        to 128 characters back), then request the next one speculatively."""
        y, x = buf.cursor
        local = local_context(buf, x, y, prev=(), config=self.config, indent_last=self.indent_last)
        content = self._cache_get(local.key)
        if content is None:
            before = local.prefix + local.middle
            best = 0  # as in llama.vim, the first found does not set it
            for i in range(min(128, len(before))):
                cached = self._cache_get(before[: -(1 + i)] + _CACHE_KEY_SEP + local.suffix)
                if not cached or cached[: i + 1] != before[-(1 + i) :]:
                    continue
                rest = cached[i + 1 :]
                if rest and content is None:
                    content = rest
                elif len(rest) > best:
                    best, content = len(rest), rest
        if content is None:
            return
        self.hint = _render(buf, x, y, content)
        yield from self._fim(buf, x, y, self.hint.content, event)

    def accept(self, buf: Buffer) -> bool:
        """`llama#fim_accept('full')`: insert the suggestion and move the cursor past it."""
        hint = self.hint
        self.hint = None
        if hint is None or not hint.can_accept:
            return False
        buf.lines[hint.y - 1] = hint.line_cur[: hint.x] + hint.content[0]
        buf.lines[hint.y : hint.y] = hint.content[1:]
        if len(hint.content) == 1:
            buf.cursor = (hint.y, hint.x + len(hint.content[0]))
        else:
            buf.cursor = (hint.y + len(hint.content) - 1, len(hint.content[-1]))
        return True


def _render(buf: Buffer, x: int, y: int, raw: str) -> Hint:
    """`s:fim_render`'s reading of an answer: what is shown, and whether it can be accepted
    (its rules against a suggestion that repeats the text after the cursor)."""
    content = raw.split("\n")
    while content and content[-1] == "":
        content.pop()
    can_accept = bool(content)
    content = content or [""]
    line_cur = buf.lines[y - 1]
    cur_prefix, cur_suffix = line_cur[:x], line_cur[x:]
    if (
        len(content) > 1
        and content[0] == ""
        and content[1:] == buf.getline(y + 1, y + len(content) - 1)
    ):
        content = [""]
    if len(content) == 1 and content[0] == cur_suffix:
        content = [""]
    cmp_y = y + 1
    while cmp_y < len(buf.lines) and _BLANK.fullmatch(buf.lines[cmp_y - 1]):
        cmp_y += 1
    if cmp_y <= len(buf.lines) and cur_prefix + content[0] == buf.lines[cmp_y - 1]:
        following = buf.getline(cmp_y + 1, cmp_y + len(content) - 1)
        if (
            len(content) == 1
            or (len(content) == 2 and "".join(following).startswith(content[1]))
            or (len(content) > 2 and content[1:] == following)
        ):
            content = [""]
    content[-1] += cur_suffix
    if _BLANK.fullmatch("\n".join(content)):
        can_accept = False
    return Hint(x, y, line_cur, content, can_accept)


def _stand_in_answer(buf: Buffer, y: int, line_before_cursor: str) -> str:
    """The server's answer in the session: the rest of the file's line being retyped."""
    original = buf.original[y - 1] if y <= len(buf.original) else ""
    if original.startswith(line_before_cursor):
        return original[len(line_before_cursor) :]
    return ""
