"""A seeded editing session over a real source file, and the requests llama.vim sends in it.

The user opens the file, moves the cursor (a few lines, or a jump), now and then yanks lines,
saves, or looks at another file (buffer leave and enter: the ring picks chunks); then deletes
the rest of a line (`C`), types a few of its characters (a request per keystroke, as when the
server answers faster than the user types), accepts the suggestion or undoes the edit, and
pauses in normal mode, where the ring updates. llama.vim's side is `localspec.bench.llama_vim`;
the stand-in answers are single lines, so its rules for multi-line suggestions are not
exercised. The shipped files are CPython's difflib.py (edited) and heapq.py (visited).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources

from localspec.bench.llama_vim import WARMUP, Buffer, EditorRequest, Vim, VimConfig, indent_of


@dataclass(frozen=True)
class SourceFile:
    name: str
    text: str


def shipped_files() -> list[SourceFile]:
    """The shipped session files (PSF-licensed CPython modules): the edited one first."""
    folder = resources.files("localspec") / "workloads" / "editor"
    return [
        SourceFile(name, (folder / f"{name}.txt").read_text(encoding="utf-8"))
        for name in ("difflib.py", "heapq.py")
    ]


def editor_session(
    files: Sequence[SourceFile] | None = None,
    *,
    fim_requests: int = 35,
    seed: int = 0,
    config: VimConfig | None = None,
) -> list[EditorRequest]:
    """The requests of a seeded session editing `files[0]` (default: the shipped files):
    `fim_requests` completions (speculative ones included) and the warm-ups between them."""
    requests: list[EditorRequest] = []
    fims = 0
    for request in _session(files or shipped_files(), seed, config or VimConfig(), fim_requests):
        if request.kind != WARMUP:
            if fims == fim_requests:
                break
            fims += 1
        requests.append(request)
    return requests


def _session(
    files: Sequence[SourceFile], seed: int, config: VimConfig, fim_requests: int
) -> Iterator[EditorRequest]:
    rng = random.Random(seed)
    vim = Vim(config, rng)
    main, *others = [Buffer.open(source.name, source.text) for source in files]
    main.cursor = (rng.randint(1, len(main.lines)), 0)
    _buffer_event(vim, main)  # BufEnter
    yield from vim.tick(1)
    for _ in range(100 * fim_requests + 100):  # every edit sends a request or two
        roll = rng.random()
        if others and roll < 0.15:
            yield from _visit(vim, main, rng.choice(others), rng)
        elif roll < 0.3:
            y = main.cursor[0]
            vim.ring.pick(main.getline(y, y + rng.randint(2, 10) - 1), main.filename, do_evict=True)
        elif roll < 0.4:
            main.saved = list(main.lines)  # :w, then BufWritePost picks a chunk
            _buffer_event(vim, main)
        _move(main, rng)
        yield from vim.tick(1)
        yield from _edit(vim, main, rng)
        yield from vim.tick(rng.randint(1, 4))


def _buffer_event(vim: Vim, buf: Buffer) -> None:
    """BufEnter, BufLeave, BufWritePost: a chunk around the cursor, from unmodified files."""
    if not buf.modified:
        buf_chunk = buf.around_cursor(vim.config.ring_chunk_size // 2)
        vim.ring.pick(buf_chunk, buf.filename, do_evict=True)


def _visit(vim: Vim, main: Buffer, other: Buffer, rng: random.Random) -> Iterator[EditorRequest]:
    """`:e other`, read it a few seconds (the ring updates meanwhile), and come back."""
    _buffer_event(vim, main)
    other.cursor = (rng.randint(1, len(other.lines)), 0)
    _buffer_event(vim, other)
    yield from vim.tick(rng.randint(2, 5))
    _buffer_event(vim, other)
    _buffer_event(vim, main)


def _move(buf: Buffer, rng: random.Random) -> None:
    """A few lines up or down, or a jump; then on to the next line with code to retype."""
    y = buf.cursor[0]
    if rng.random() < 0.7:
        y += rng.choice([-1, 1]) * rng.randint(1, 8)
    else:
        y = rng.randint(1, len(buf.lines))
    y = min(max(y, 1), len(buf.lines))
    for step in range(len(buf.lines)):
        candidate = (y - 1 + step) % len(buf.lines) + 1
        if len(buf.lines[candidate - 1].strip()) >= 6:
            buf.cursor = (candidate, 0)
            return
    raise ValueError(f"{buf.filename} has no line with code to edit")


def _edit(vim: Vim, buf: Buffer, rng: random.Random) -> Iterator[EditorRequest]:
    """`C` somewhere in the line, type a few of its characters, accept or undo."""
    y = buf.cursor[0]
    before = buf.lines[y - 1]
    indent = indent_of(before)
    column = indent + rng.randint(1, min(len(before.strip()) - 3, 16))
    rest = before[column:]
    buf.lines[y - 1] = before[:column]
    for typed in range(1, rng.randint(1, min(4, len(rest) - 1)) + 1):
        buf.lines[y - 1] = before[: column + typed]
        buf.cursor = (y, column + typed)
        yield from vim.cursor_moved_insert(buf, "type")
    if rng.random() < 0.6 and vim.accept(buf):
        yield from vim.cursor_moved_insert(buf, "accept")
    else:
        buf.lines[y - 1] = before  # <Esc>u
    vim.hint = None  # InsertLeavePre hides the suggestion
