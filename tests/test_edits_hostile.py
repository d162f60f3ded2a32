"""Hostile edit targets (issue 29): each is refused in one line naming the problem, or done
safely, and nothing outside the working folder is ever written. Real files in a temporary
folder: the working folder `project` and, beside it, a folder `outside` an edit must not reach.
"""

from __future__ import annotations

import io
import os
import re
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localspec.cli.apply import apply_answer
from localspec.edits import (
    EditError,
    FileChange,
    atomic_write,
    fs,
    mismatch,
    parse,
    parse_edits,
    plan_changes,
    write_changes,
)
from localspec.edits.apply import closest
from localspec.edits.parse import FENCE, Edit
from tests.test_edits import CALC, block

SECRET = b"TOKEN=do-not-touch\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "calc.py").write_text(CALC)
    (folder / "pkg" / "mod.py").write_text("x = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("x = 1\n")  # what pkg/mod.py holds: a stale check passes
    (outside / "calc.py").write_text(CALC)
    (outside / "secret.py").write_bytes(SECRET)
    return folder


def files(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder`, links not followed: a file's bytes, a link's target."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = "folder" if path.is_dir() else "special"
    return found


def plan(answer: str, root: Path) -> list[FileChange]:
    return plan_changes(parse_edits(answer), root)


def refused(answer: str, root: Path) -> str:
    """The one problem planning `answer` reports."""
    with pytest.raises(EditError) as failed:
        plan(answer, root)
    (problem,) = failed.value.problems
    return problem


# -- a folder or the file turned into a link between the plan and the write -------------------
def swap_folder(root: Path) -> None:
    (root / "pkg").rename(root / "pkg-was")
    (root / "pkg").symlink_to(root.parent / "outside")


@pytest.mark.parametrize(
    "answer",
    [
        block("x = 1\n", "x = 2\n", "pkg/mod.py"),  # a file the plan read
        block("", "made = 1\n", "pkg/new.py"),  # a file the plan creates
        block("", "made = 1\n", "pkg/deeper/new.py"),  # ... in a folder it creates
    ],
    ids=["edit", "create", "create-folder"],
)
def test_a_folder_swapped_for_a_link_after_the_plan_is_refused(root: Path, answer: str) -> None:
    outside = files(root.parent / "outside")
    changes = plan(answer, root)
    swap_folder(root)
    with pytest.raises(EditError) as failed:
        write_changes(changes)
    (problem,) = failed.value.problems
    assert f"{root / 'pkg'} is a link now, not the folder it was" in problem
    assert problem.endswith("nothing was written")
    assert files(root.parent / "outside") == outside
    assert (root / "pkg-was" / "mod.py").read_text() == "x = 1\n"


def test_undoing_a_creation_through_a_swapped_folder_removes_nothing(root: Path) -> None:
    outside = files(root.parent / "outside")
    swap_folder(root)
    target = root / "pkg" / "mod.py"  # as recorded when pkg was a folder
    with pytest.raises(EditError, match="is a link now"):
        write_changes([FileChange("pkg/mod.py", target, "x = 1\n", None)])
    assert files(root.parent / "outside") == outside


def test_the_file_swapped_for_a_link_after_the_plan_is_refused(root: Path) -> None:
    changes = plan(block("    return a + b\n", "    pass\n"), root)
    (root / "calc.py").unlink()
    (root / "calc.py").symlink_to(root.parent / "outside" / "calc.py")  # the same text
    with pytest.raises(EditError, match=r"calc\.py is a link, not a plain file"):
        write_changes(changes)
    assert (root.parent / "outside" / "calc.py").read_text() == CALC
    assert (root / "calc.py").is_symlink()


def test_a_hard_link_to_a_file_outside_is_replaced_not_written_through(root: Path) -> None:
    """Decided: a file with other links is edited; the rename gives the working folder's name
    a new file, and the other names keep the old one."""
    os.link(root.parent / "outside" / "secret.py", root / "hard.py")
    write_changes(plan(block("TOKEN=do-not-touch\n", "TOKEN=changed\n", "hard.py"), root))
    assert (root / "hard.py").read_bytes() == b"TOKEN=changed\n"
    assert (root.parent / "outside" / "secret.py").read_bytes() == SECRET
    assert (root.parent / "outside" / "secret.py").stat().st_nlink == 1


def test_a_relative_target_is_taken_from_the_working_folder(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root / "pkg")
    atomic_write(Path("made.py"), "x\n")
    atomic_write(Path("../made.py"), "y\n")
    assert (root / "pkg" / "made.py").read_text() == "x\n"
    assert (root / "made.py").read_text() == "y\n"


def test_a_working_folder_reached_through_a_link_is_edited(root: Path) -> None:
    (root.parent / "via").symlink_to(root)
    write_changes(plan(block("x = 1\n", "x = 2\n", "pkg/mod.py"), root.parent / "via"))
    assert (root / "pkg" / "mod.py").read_text() == "x = 2\n"


# -- files that are not plain files ---------------------------------------------------------------
def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()


@pytest.mark.timeout(60)  # a hang guard: a FIFO once blocked the read forever
@pytest.mark.parametrize(
    ("make", "kind"), [(make_fifo, "a FIFO"), (make_socket, "a socket")], ids=["fifo", "socket"]
)
def test_a_fifo_or_a_socket_is_refused_without_blocking(
    root: Path, make: Callable[[Path], None], kind: str
) -> None:
    make(root / "pipe.txt")
    problem = refused(block("a\n", "b\n", "pipe.txt"), root)
    assert problem.endswith(f"pipe.txt is {kind}, not a plain file: edits only go to plain files")
    changes = plan(block("    return a + b\n", "    pass\n"), root)
    (root / "calc.py").unlink()
    make(root / "calc.py")  # swapped in after the plan: the write refuses it too
    with pytest.raises(EditError, match=f"calc.py is {kind}, not a plain file"):
        write_changes(changes)


def test_a_device_is_refused(root: Path) -> None:
    (root / "null.txt").symlink_to("/dev/null")  # the link leaves the folder: refused as outside
    assert "is outside" in refused(block("a\n", "b\n", "null.txt"), root)
    assert "is a character device" in refused(block("a\n", "b\n", "/dev/null"), Path("/dev"))


def test_a_link_loop_is_refused(root: Path) -> None:
    (root / "loop.py").symlink_to("loop.py")
    assert refused(block("a\n", "b\n", "loop.py"), root).endswith(
        "loop.py is a link, not a plain file: edits only go to plain files"
    )


# -- paths --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("a\0b.py", "the path 'a\\x00b.py' holds a NUL byte"),
        ("x" * 300 + ".py", "has a name of 303 bytes, over the 255 a file name may have"),
        ("pkg/" + "d" * 250 + "/x" * 2100, "is over the 4096 bytes a path may have"),
        ("\x1b]0;title\x07.py", "holds control characters"),
        ("~/.bashrc", "~/.bashrc starts with ~, which only a shell turns into a home folder"),
        ("~root/.profile", "starts with ~"),
        (".git/hooks/pre-commit", ".git/hooks/pre-commit is inside .git"),
        ("pkg/../.GIT/config", "is inside .git"),
        ("pkg/../../outside/secret.py", "pkg/../../outside/secret.py is outside"),
        ("pkg/./../../outside/x.py", "is outside"),
    ],
    ids=[
        "nul",
        "long-name",
        "long-path",
        "control",
        "tilde",
        "tilde-alone",
        "git",
        "git-dotdot",
        "dotdot",
        "dotdot-new",
    ],
)
@pytest.mark.parametrize("search", ["a\n", ""], ids=["edit", "create"])
def test_a_path_no_file_can_have_is_refused_in_one_line(
    root: Path, path: str, problem: str, search: str
) -> None:
    before = files(root.parent)
    out = io.StringIO()
    answer = f"{path}\n" + block(search, "b = 1\n", None)
    assert apply_answer(answer, dry_run=False, root=root, out=out) == 1
    error, nothing = out.getvalue().splitlines()
    assert error.startswith("localspec: error: block 1 (")
    assert problem in error
    assert nothing == "localspec: nothing was written"
    assert files(root.parent) == before


def test_a_file_where_a_folder_should_be_is_one_line(root: Path) -> None:
    out = io.StringIO()
    assert apply_answer(block("", "x\n", "calc.py/new.py"), False, root=root, out=out) == 1
    assert out.getvalue().splitlines()[-2:] == [
        "localspec: error: cannot write calc.py/new.py: Not a directory; no file was changed",
        "localspec: nothing was written",
    ]


# -- line endings, modes, sizes -----------------------------------------------------------------
def test_mixed_line_endings_are_kept_line_by_line(root: Path) -> None:
    (root / "mixed.py").write_bytes(b"a = 1\r\nb = 2\nc = 3\r\nd = 4\n\r\ne = 5")
    answer = (
        block("b = 2\n", "b = 20\nb2 = 21\n", "mixed.py")  # an LF line: LF lines
        + block("c = 3\n", "c = 30\n", "mixed.py")  # a CRLF line: a CRLF line
        + block("e = 5\n", "e = 50\nf = 6\n", "mixed.py")  # the last line, unended
    )
    write_changes(plan(answer, root))
    assert (root / "mixed.py").read_bytes() == (
        b"a = 1\r\nb = 20\nb2 = 21\nc = 30\r\nd = 4\n\r\ne = 50\nf = 6"
    )


def test_a_whole_file_block_takes_the_most_common_ending(root: Path) -> None:
    (root / "mixed.py").write_bytes(b"a\r\nb\r\nc\n")
    write_changes(plan_changes([Edit("mixed.py", None, "x\ny\n", 1)], root))
    assert (root / "mixed.py").read_bytes() == b"x\r\ny\r\n"


@pytest.mark.parametrize("mode", [0o444, 0o4755, 0o700])
def test_a_read_only_or_special_mode_is_kept(root: Path, mode: int) -> None:
    (root / "calc.py").chmod(mode)
    write_changes(plan(block("    return a + b\n", "    pass\n"), root))
    assert stat.S_IMODE((root / "calc.py").stat().st_mode) == mode
    assert "    pass\n" in (root / "calc.py").read_text()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_a_read_only_folder_is_one_line(root: Path) -> None:
    changes = plan(block("x = 1\n", "x = 2\n", "pkg/mod.py"), root)
    (root / "pkg").chmod(0o555)
    try:
        with pytest.raises(EditError, match=r"cannot write pkg/mod\.py: Permission denied"):
            write_changes(changes)
    finally:
        (root / "pkg").chmod(0o755)
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"


def test_files_and_edits_over_the_size_limit_are_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs, "MAX_BYTES", 1024)
    (root / "big.py").write_bytes(b"x\n" * 600)
    assert refused(block("x\n", "y\n", "big.py"), root).endswith(
        "big.py is over 1024 bytes: edit it by hand"
    )
    huge = "y = 1\n" * 200
    assert "the edit makes calc.py over 1024 bytes" in refused(
        block("    return a + b\n", huge), root
    )
    assert (root / "calc.py").read_text() == CALC


# -- bounded work on big files and long SEARCH texts ----------------------------------------------
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Characters compared by each comparison `closest` makes."""
    seen: list[int] = []
    alike = mismatch._alike

    def counting(a: str, b: str) -> float:
        seen.append(len(a) + len(b))
        return alike(a, b)

    monkeypatch.setattr(mismatch, "_alike", counting)
    return seen


def test_closest_in_a_20_mb_file_of_long_lines_compares_a_bounded_amount(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = [f"{row:05d} " + "w" * 9_994 for row in range(2_000)]  # 20 MB, 10,000-char lines
    text = "\n".join(lines) + "\n"
    wanted = lines[700:900]
    wanted[50] = wanted[50].replace("w", "v", 1)  # the one line that differs
    seen = counted(monkeypatch)
    said = closest(Edit("big.py", "\n".join(wanted) + "\n", "", 1), text)
    assert said.startswith("the closest is line 751, which differs in its text")
    rows, line = mismatch.ROWS, mismatch.LINE_CHARS
    assert len(seen) <= mismatch.CANDIDATES * rows
    assert max(seen) <= 2 * line
    assert sum(seen) <= mismatch.CANDIDATES * rows * 2 * line


def test_closest_in_a_small_file_compares_every_window(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = counted(monkeypatch)
    said = closest(Edit("calc.py", "    return a - c\n", "", 1), CALC)
    assert said.startswith("the closest is line 6, which differs in its text")
    assert len(seen) == len(CALC.splitlines())  # a one-line SEARCH: one comparison a line


@pytest.mark.timeout(60)  # a hang guard: this took minutes when each occurrence was checked
def test_a_search_found_everywhere_but_at_a_line_start_is_one_pass(root: Path) -> None:
    """Each of a million occurrences of the SEARCH text once cost a comparison of its whole
    length; it is looked for once now."""
    (root / "dc.txt").write_text("dc\n" * 1_000_000)
    problem = refused(block("c\ndc\n" * 5_000, "x\n", "dc.txt"), root)
    assert "the SEARCH text is not in dc.txt exactly" in problem


# -- answers built to make the parser slow -------------------------------------------------------
class _CountingFence:
    def __init__(self) -> None:
        self.calls = 0

    def match(self, line: str) -> re.Match[str] | None:
        self.calls += 1
        return FENCE.match(line)


def test_fences_that_never_close_are_matched_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model looping on "```a" once cost a scan of the rest of the answer per fence."""
    counting = _CountingFence()
    monkeypatch.setattr(parse, "FENCE", counting)
    assert parse_edits("```a\n" * 20_000) == []
    assert counting.calls == 20_000


@given(
    st.lists(
        st.tuples(st.sampled_from("`~"), st.integers(3, 6), st.sampled_from(["", "py", "  "])),
        max_size=30,
    )
)
def test_a_fence_closes_at_the_first_bare_fence_as_long(
    fences: list[tuple[str, int, str]],
) -> None:
    lines = [char * length + info + "\n" for char, length, info in fences]
    found = parse._Fences(lines)
    for row, line in enumerate(lines):
        marker = line.split()[0].rstrip("py")
        plain = (
            later
            for later in range(row + 1, len(lines))
            if lines[later].strip()
            and set(lines[later].strip()) == {marker[0]}
            and len(lines[later].strip()) >= len(marker)
        )
        assert found.closing(row, marker) == next(plain, None)
