"""Files as context: the one rendering every surface sends, and what is refused as not text."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from localspec.context_files import (
    DIFF_LABEL,
    FILES_HEADER,
    MAX_BYTES,
    ContextFile,
    files_block,
    git_diff,
    language_for,
    load_file,
    read_text_file,
    render_file,
    render_files,
    system_prompt,
)
from localspec.errors import ContextFileError, UsageError


def test_a_file_is_its_path_and_a_fenced_block_in_its_language() -> None:
    rendered = render_file(ContextFile("src/x.py", "def f():\n    return 1\n", "python"))
    assert rendered == "src/x.py:\n```python\ndef f():\n    return 1\n```"
    # a file without a final newline still closes its fence on a line of its own
    assert render_file(ContextFile("a.txt", "no newline")) == "a.txt:\n```\nno newline\n```"


def test_the_fence_is_longer_than_any_fence_inside_the_file() -> None:
    content = "Answer:\n````python\nx = 1\n````\n"
    rendered = render_file(ContextFile("notes.md", content, "markdown"))
    assert rendered.startswith("notes.md:\n`````markdown\n")
    assert rendered.endswith("\n`````")


@pytest.mark.parametrize(
    ("name", "language"),
    [("a.py", "python"), ("b.RS", "rust"), ("Makefile", "make"), ("x.unknown", ""), ("c", "")],
)
def test_language_comes_from_the_extension_or_name(name: str, language: str) -> None:
    assert language_for(name) == language


def test_files_follow_the_header_and_the_system_prompt() -> None:
    files = [ContextFile("a.py", "a = 1\n", "python"), ContextFile("b.md", "# B\n", "markdown")]
    block = render_files(files)
    assert block == (
        f"{FILES_HEADER}\n\na.py:\n```python\na = 1\n```\n\nb.md:\n```markdown\n# B\n```"
    )
    assert render_files([]) == ""
    assert system_prompt("Be brief.", block) == f"Be brief.\n\n{block}"
    assert system_prompt("", block) == block
    assert system_prompt("  ", "") == ""


def test_binary_not_utf8_missing_and_folders_are_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "dir").mkdir()
    cases = {
        "blob.bin": "blob.bin is a binary file",
        "latin.txt": "latin.txt is not UTF-8 text (byte 3)",
        "missing.py": "missing.py: no such file",
        "dir": "dir is a folder",
    }
    for name, message in cases.items():
        with pytest.raises(ContextFileError) as caught:
            read_text_file(tmp_path / name, name)
        assert str(caught.value).startswith(message)
        assert "\n" not in str(caught.value)
        assert isinstance(caught.value, UsageError)  # exit status 2 on the command line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_says_why(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    with pytest.raises(ContextFileError, match=r"cannot read secret\.txt: Permission denied"):
        read_text_file(secret, "secret.txt")


def test_files_block_renders_the_paths_as_given(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print(1)\n")
    assert load_file(tmp_path / "x.py", "x.py") == ContextFile("x.py", "print(1)\n", "python")
    block = files_block([tmp_path / "x.py"])
    assert block == f"{FILES_HEADER}\n\n{tmp_path / 'x.py'}:\n```python\nprint(1)\n```"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_git_diff_is_the_working_trees_changes_against_head(tmp_path: Path) -> None:
    with pytest.raises(ContextFileError, match="not in a git repository"):
        git_diff(tmp_path)
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("a = 1\n")
    # no commit yet: the unstaged changes (an untracked file is not among them)
    assert git_diff(tmp_path) == ContextFile(DIFF_LABEL, "", "diff")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "a.py").write_text("a = 2\n")
    diff = git_diff(tmp_path)
    assert diff.label == DIFF_LABEL and diff.language == "diff"
    assert "-a = 1\n+a = 2\n" in diff.content


def test_a_diff_larger_than_a_file_may_be_is_refused_as_it_is_read(tmp_path: Path) -> None:
    """Generated files can make a diff of gigabytes: no more than the 16 MiB a file may be is
    read, and git is stopped."""
    _git(tmp_path, "init", "-q")
    big = tmp_path / "generated.txt"
    big.write_text("")
    _git(tmp_path, "add", "generated.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    line = "x" * 1023 + "\n"
    big.write_text(line * (MAX_BYTES // len(line) + 1024))  # just over the bound, as a diff
    with pytest.raises(ContextFileError, match="is more than 16 MiB"):
        git_diff(tmp_path)


def test_a_fifo_nobody_writes_reads_as_empty_instead_of_blocking(tmp_path: Path) -> None:
    """The chat's /add reads on its UI thread: a FIFO must not block it (the thread joins
    with a timeout: a hang guard)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(read_text_file(fifo)), daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive() and read == [""]
