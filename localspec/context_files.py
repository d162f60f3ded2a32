"""Files the user puts in a prompt as context: reading them as text and rendering them.

Every surface that sends files to the model (`localspec chat`'s `/add` and `@path`,
`localspec complete --file`) renders them here, so the model sees one layout everywhere: a
short header, then each file as its path, a colon and a fenced block in the file's language.
The files go after the system prompt (`system_prompt`), before the conversation: the prompt's
prefix, and with it the KV cache, stays the same from turn to turn while the files do not change.

Nothing is cut to fit: a file is sent whole or refused. A file that is not text (a NUL byte,
or bytes that are not UTF-8) is refused too: the model would see noise, and a tokenizer cannot
carry undecodable bytes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import IO

from localspec.errors import ContextFileError

FILES_HEADER = "Files in this conversation, as they are now:"
# the mention (`@diff`) and file-set key of the working tree's changes
DIFF = "@diff"
DIFF_LABEL = "git diff HEAD"
# a file this large fits no context window; reading it would only cost memory
MAX_BYTES = 16 * 1024 * 1024
# a recorded agent session or a bench's results: many prompts in one file, still bounded
RESULTS_LIMIT = 256 * 1024 * 1024
_PIECE = 1 << 20
_GIT_TIMEOUT_S = 60

_LANGUAGES = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".jsx": "jsx",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".rs": "rust",
    ".go": "go",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".java": "java",
    ".kt": "kotlin",
    ".swift": "swift",
    ".rb": "ruby",
    ".php": "php",
    ".cs": "csharp",
    ".lua": "lua",
    ".sh": "bash",
    ".bash": "bash",
    ".zsh": "zsh",
    ".fish": "fish",
    ".ps1": "powershell",
    ".sql": "sql",
    ".html": "html",
    ".css": "css",
    ".tcss": "css",
    ".scss": "scss",
    ".json": "json",
    ".jsonl": "json",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".xml": "xml",
    ".md": "markdown",
    ".rst": "rst",
    ".diff": "diff",
    ".patch": "diff",
    ".vim": "vim",
    ".el": "elisp",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".zig": "zig",
    ".jinja": "jinja",
}
_NAMES = {"Makefile": "make", "Dockerfile": "dockerfile", "CMakeLists.txt": "cmake"}


@dataclass(frozen=True)
class ContextFile:
    """One file as the model sees it: the path it is shown under, its text, its language."""

    label: str
    content: str
    language: str = ""


def language_for(path: str | PurePath) -> str:
    """The fence's language for a file name ("" when the extension says nothing)."""
    name = PurePath(path)
    return _NAMES.get(name.name) or _LANGUAGES.get(name.suffix.lower(), "")


def fence_for(content: str) -> str:
    """Backticks one longer than the longest run in `content`, so the block cannot close
    early on a fence inside the file (a Markdown file, a test holding a fenced answer)."""
    longest = run = 0
    for character in content:
        run = run + 1 if character == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def render_file(file: ContextFile) -> str:
    """`path:` and the file's text in a fenced block, e.g. "x.py:\\n```python\\n...\\n```"."""
    fence = fence_for(file.content)
    body = file.content if not file.content or file.content.endswith("\n") else file.content + "\n"
    return f"{file.label}:\n{fence}{file.language}\n{body}{fence}"


def render_files(files: Sequence[ContextFile]) -> str:
    """The header and every file's block; "" when there are none."""
    if not files:
        return ""
    return "\n\n".join([FILES_HEADER, *(render_file(f) for f in files)])


def system_prompt(system: str, files_text: str) -> str:
    """The system message's text: the user's system prompt, then the files (either may be
    empty; with both empty there is no system message)."""
    return "\n\n".join(part for part in (system.strip(), files_text) if part)


def decode_text(raw: bytes, shown: str) -> str:
    """`raw` as text, refused when it is binary (a NUL byte) or not UTF-8."""
    if b"\0" in raw:
        raise ContextFileError(f"{shown} is a binary file: only text files can be added")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContextFileError(
            f"{shown} is not UTF-8 text (byte {exc.start}): convert it first, e.g. with iconv"
        ) from exc


def read_at_most(stream: IO[bytes], shown: str, limit: int = MAX_BYTES) -> bytes:
    """All of `stream` if it holds at most `limit` bytes, read a piece at a time; refused
    (`ContextFileError`) as soon as it holds more. The bound is what is read, not the
    size a file says it has: a pipe or a device says 0 (`/dev/zero` never ends)."""
    pieces: list[bytes] = []
    size = 0
    while size <= limit:
        piece = stream.read(min(_PIECE, limit + 1 - size))
        if not piece:
            return b"".join(pieces)
        pieces.append(piece)
        size += len(piece)
    raise ContextFileError(
        f"{shown} is more than {limit // 2**20} MiB: no context window holds it (inputs over "
        f"{limit // 2**20} MiB are not read)"
    )


def read_bytes_at_most(path: Path, shown: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the file at `path`, at most `limit` (`read_at_most`). A FIFO no program
    writes to reads as empty instead of blocking (the chat's `/add` runs on its UI thread);
    one with a writer (`--file <(git show HEAD:x.py)`) reads as it is written."""
    if path.is_dir():
        raise ContextFileError(f"{shown} is a folder: give a file")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(descriptor, True)
    with os.fdopen(descriptor, "rb") as handle:
        return read_at_most(handle, shown, limit)


def read_text_file(path: Path, shown: str | None = None, limit: int = MAX_BYTES) -> str:
    """The whole text of `path` (`shown` names it in errors: the path the user typed), at
    most `limit` bytes of it."""
    shown = str(path) if shown is None else shown
    try:
        if path.is_dir():
            raise ContextFileError(f"{shown} is a folder: add the files in it (e.g. {shown}/*.py)")
        raw = read_bytes_at_most(path, shown, limit)
    except FileNotFoundError as exc:
        raise ContextFileError(f"{shown}: no such file") from exc
    except OSError as exc:
        raise ContextFileError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    return decode_text(raw, shown)


def load_file(path: Path, label: str | None = None) -> ContextFile:
    """`path` read as a context file shown as `label` (default: the path as given)."""
    shown = str(path) if label is None else label
    return ContextFile(shown, read_text_file(path, shown), language_for(path))


def git_diff(root: Path) -> ContextFile:
    """The working tree's changes against HEAD (staged and not; new files only once staged),
    as `@diff` sends them; a repository without a commit yet gives its unstaged changes."""
    if _git(root, ["rev-parse", "--is-inside-work-tree"]).returncode != 0:
        raise ContextFileError(f"{root} is not in a git repository: @diff needs one")
    head = _git(root, ["rev-parse", "--verify", "--quiet", "HEAD"]).returncode == 0
    diff = ["diff", "--no-color", "--no-ext-diff", *(["HEAD"] if head else []), "--"]
    return ContextFile(DIFF_LABEL, decode_text(_git_output(root, diff), DIFF_LABEL), "diff")


def _git_output(root: Path, args: list[str]) -> bytes:
    """git's output, at most MAX_BYTES of it as a file's would be (a diff of generated files
    can be gigabytes: it is refused once that much is read, and git is stopped), within
    the same time as every git call."""
    with tempfile.TemporaryFile() as errors:
        try:
            git = subprocess.Popen(
                ["git", "-C", str(root), *args], stdout=subprocess.PIPE, stderr=errors
            )
        except FileNotFoundError as exc:
            raise ContextFileError("@diff needs git, which is not installed (not on PATH)") from exc
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            git.kill()

        late = threading.Timer(_GIT_TIMEOUT_S, stop)
        late.start()
        try:
            assert git.stdout is not None
            with git.stdout:
                output = read_at_most(git.stdout, DIFF_LABEL)
        except BaseException:
            git.kill()  # refused: nothing more of it is read
            raise
        finally:
            code = git.wait()
            late.cancel()
        if timed_out.is_set():
            raise ContextFileError(f"git diff took over {_GIT_TIMEOUT_S} s in {root}")
        if code != 0:
            errors.seek(0)
            lines = errors.read(4096).decode("utf-8", "replace").strip().splitlines()
            raise ContextFileError(f"git diff failed in {root}: {lines[-1] if lines else '?'}")
    return output


def _git(root: Path, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ContextFileError("@diff needs git, which is not installed (not on PATH)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ContextFileError(f"git diff took over {_GIT_TIMEOUT_S} s in {root}") from exc


def files_block(paths: Sequence[Path]) -> str:
    """The rendered block for files named on a command line (`complete --file`), each shown
    by its path as given; "" for none. Raises `ContextFileError` for the first that cannot be
    sent."""
    return render_files([load_file(path) for path in paths])
