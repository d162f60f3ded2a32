"""`localspec.edits`: finding an answer's edits, applying them exactly, writing atomically."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from localspec.edits import (
    Edit,
    EditError,
    FileChange,
    atomic_write,
    parse_edits,
    plan_changes,
    unified_diff,
    write_changes,
)

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def block(search: str, replace: str, path: str | None = "calc.py", lang: str = "python") -> str:
    above = f"{path}\n" if path is not None else ""
    return f"{above}```{lang}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "calc.py").write_text(CALC)
    return folder


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        "Change it:\n\ncalc.py\n```python\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```",
        "```python calc.py\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        "```calc.py\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        "```python\ncalc.py\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        "**calc.py**\n```python\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        "`./calc.py`:\n```\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        "calc.py\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n",  # no fence at all
        "calc.py\r\n```python\r\n<<<<<<< SEARCH\r\nold\r\n=======\r\nnew\r\n>>>>>>> REPLACE\r\n```",
    ],
    ids=["above", "info", "info-only", "inside", "bold", "quoted", "unfenced", "crlf"],
)
def test_a_block_names_its_file_where_models_put_it(answer: str) -> None:
    assert parse_edits(answer) == [
        Edit("calc.py", "old\n", "new\n", answer.count("\n", 0, answer.index("<<<")) + 1)
    ]


def test_several_blocks_in_one_fence_belong_to_the_file_named_first() -> None:
    answer = (
        "calc.py\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
        "<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n```\n\n"
        "```python\n<<<<<<< SEARCH\ne\n=======\nf\n>>>>>>> REPLACE\n```\n"
        "other.py\n```python\n<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\n```\n"
    )
    edits = parse_edits(answer)
    assert [(e.path, e.search, e.replace, e.kind) for e in edits] == [
        ("calc.py", "a\n", "b\n", "SEARCH/REPLACE"),
        ("calc.py", "c\n", "d\n", "SEARCH/REPLACE"),
        ("calc.py", "e\n", "f\n", "SEARCH/REPLACE"),
        ("other.py", "", "new\n", "new file"),
    ]


def test_a_block_without_any_file_is_refused_with_its_line() -> None:
    answer = "Here:\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n"
    with pytest.raises(EditError, match="block at line 3 of the answer names no file"):
        parse_edits(answer)


@pytest.mark.parametrize(
    ("cut", "missing"),
    [("<<<<<<< SEARCH\na\n", "======="), ("<<<<<<< SEARCH\na\n=======\nb\n", ">>>>>>> REPLACE")],
)
def test_a_block_cut_short_is_refused(cut: str, missing: str) -> None:
    with pytest.raises(EditError, match=f"calc.py at line 3 of the answer has no `{missing}`"):
        parse_edits(f"calc.py\n```python\n{cut}")


def test_whole_file_blocks_are_edits_only_for_added_files() -> None:
    answer = (
        "src/calc.py\n```python\nprint(1)\n```\n"  # added: the whole file, rewritten
        "```python calc.py\nprint(2)\n```\n"  # the added file without its folder
        "example.py\n```python\nprint(3)\n```\n"  # never shown to the model: an example
        "```python\nprint(4)\n```\n"  # no name at all
    )
    edits = parse_edits(answer, ["src/calc.py"])
    assert [(e.path, e.search, e.replace, e.kind) for e in edits] == [
        ("src/calc.py", None, "print(1)\n", "whole file"),
        ("src/calc.py", None, "print(2)\n", "whole file"),
    ]
    assert parse_edits(answer) == []


def test_a_longer_fence_holds_a_file_with_fences_in_it() -> None:
    readme = "# Use\n```sh\nmake\n```\n"
    answer = f"README.md\n````markdown\n{readme}````\n"
    assert parse_edits(answer, ["README.md"]) == [Edit("README.md", None, readme, 2)]


def test_a_search_replace_fence_is_not_taken_for_a_whole_file() -> None:
    answer = block("a\n", "b\n") + "calc.py\n```python\nwhole\n```\n"
    edits = parse_edits(answer, ["calc.py"])
    assert [e.kind for e in edits] == ["SEARCH/REPLACE", "whole file"]


# -- applying ---------------------------------------------------------------------------------
def test_blocks_apply_in_order_and_the_diff_shows_them(root: Path) -> None:
    answer = block("    return a + b\n", "    return b + a\n") + block(
        "def sub(a, b):\n    return a - b\n", "def sub(a, b):\n    return -(b - a)\n"
    )
    changes = plan_changes(parse_edits(answer), root)
    assert (root / "calc.py").read_text() == CALC  # planning writes nothing
    assert unified_diff(changes) == (
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,6 +1,6 @@\n def add(a, b):\n"
        "-    return a + b\n+    return b + a\n \n \n def sub(a, b):\n"
        "-    return a - b\n+    return -(b - a)\n"
    )
    write_changes(changes)
    assert (root / "calc.py").read_text() == CALC.replace("a + b", "b + a").replace(
        "a - b", "-(b - a)"
    )


def test_the_diff_is_one_git_applies(root: Path) -> None:
    (root / "calc.py").write_text(CALC.rstrip("\n"))  # no final newline: diff marks it
    answer = block("    return a - b\n", "    return a - b - 0\n") + block(
        "", "VALUE = 1\n", "pkg/new.py"
    )
    changes = plan_changes(parse_edits(answer), root)
    assert "\\ No newline at end of file" in unified_diff(changes)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "apply"], cwd=root, input=unified_diff(changes), text=True, check=True)
    assert [(root / c.path).read_text() for c in changes] == [c.after for c in changes]


def test_a_search_that_does_not_match_names_the_block_and_the_closest_line(root: Path) -> None:
    answer = block("    return a + b\n", "    return b + a\n") + block(
        "def sub(a, b):\n    return a-b\n", "def sub(a, b):\n    return 0\n"
    )
    with pytest.raises(EditError) as failed:
        plan_changes(parse_edits(answer), root)
    (problem,) = failed.value.problems  # the first block applies: only the second is named
    assert problem.startswith("block 2 (SEARCH/REPLACE for calc.py, answer line 11): ")
    assert "the closest is line 6, which differs only in white space" in problem
    assert "'    return a - b'" in problem
    assert (root / "calc.py").read_text() == CALC
    assert listing(root) == ["calc.py"]


def test_nothing_like_the_search_is_said_too(root: Path) -> None:
    with pytest.raises(EditError, match="no lines of it are alike"):
        plan_changes(parse_edits(block("import os\n", "import sys\n")), root)


def test_a_search_matches_whole_lines_only(root: Path) -> None:
    with pytest.raises(EditError, match=re.escape("not in calc.py exactly")):
        plan_changes(parse_edits(block("a + b\n", "0\n")), root)  # the end of a line


def test_a_missing_final_newline_is_the_one_difference_allowed(root: Path) -> None:
    (root / "calc.py").write_text("x = 1\ny = 2")
    changes = plan_changes(parse_edits(block("y = 2\n", "y = 3\n")), root)
    assert [c.after for c in changes] == ["x = 1\ny = 3"]


def test_the_first_of_two_occurrences_changes(root: Path) -> None:
    (root / "calc.py").write_text("pass\npass\n")
    changes = plan_changes(parse_edits(block("pass\n", "return\n")), root)
    assert [c.after for c in changes] == ["return\npass\n"]


def test_windows_line_endings_are_kept(root: Path) -> None:
    (root / "calc.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    write_changes(plan_changes(parse_edits(block("b = 2\n", "b = 3\n")), root))
    assert (root / "calc.py").read_bytes() == b"a = 1\r\nb = 3\r\n"


def test_an_empty_search_creates_a_file_but_never_overwrites_one(root: Path) -> None:
    changes = plan_changes(parse_edits(block("", "VALUE = 1\n", "pkg/consts.py")), root)
    assert unified_diff(changes) == (
        "--- /dev/null\n+++ b/pkg/consts.py\n@@ -0,0 +1 @@\n+VALUE = 1\n"
    )
    write_changes(changes)
    assert (root / "pkg" / "consts.py").read_text() == "VALUE = 1\n"
    with pytest.raises(
        EditError, match=re.escape("an empty SEARCH creates a file, but calc.py exists")
    ):
        plan_changes(parse_edits(block("", "x\n")), root)


@pytest.mark.parametrize(
    ("edits", "problem"),
    [
        (block("a\n", "b\n", "missing.py"), "missing.py does not exist: check the path"),
        (block("a\n", "b\n", "../outside.py"), "is outside"),
        (block("a\n", "b\n", "/etc/hostname"), "/etc/hostname is outside"),
        (block("a\n", "b\n", "data.bin"), "data.bin is not UTF-8 text"),
        (block("a\n", "b\n", "pkg/"), "pkg/ is a folder"),
    ],
)
def test_files_that_cannot_take_the_edit_are_refused(root: Path, edits: str, problem: str) -> None:
    (root / "data.bin").write_bytes(b"\xff\xfe\x00")
    (root / "pkg").mkdir()
    with pytest.raises(EditError, match=problem.replace("/", ".")):
        plan_changes(parse_edits(edits), root)


def test_every_failing_block_is_listed_and_no_file_is_written(root: Path) -> None:
    (root / "other.py").write_text("x = 1\n")
    answer = (
        block("x = 1\n", "x = 2\n", "other.py")
        + block("nope\n", "y\n")
        + block("", "new\n", "new.py")
        + block("never\n", "z\n")
    )
    with pytest.raises(EditError) as failed:
        plan_changes(parse_edits(answer), root)
    assert [p.split(" ", 2)[1] for p in failed.value.problems] == ["2", "4"]
    assert (root / "other.py").read_text() == "x = 1\n"
    assert listing(root) == ["calc.py", "other.py"]


def test_edits_that_change_nothing_leave_no_change(root: Path) -> None:
    assert plan_changes(parse_edits(block("def add(a, b):\n", "def add(a, b):\n")), root) == []


def test_a_link_is_written_through(root: Path) -> None:
    (root / "link.py").symlink_to("calc.py")
    write_changes(
        plan_changes(parse_edits(block("    return a + b\n", "    pass\n", "link.py")), root)
    )
    assert (root / "link.py").is_symlink()
    assert "    pass\n" in (root / "calc.py").read_text()


# -- writing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o755, 0o600, 0o640])
def test_the_file_mode_is_kept(root: Path, mode: int) -> None:
    path = root / "calc.py"
    path.chmod(mode)
    write_changes(plan_changes(parse_edits(block("    return a + b\n", "    pass\n")), root))
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert listing(root) == ["calc.py"]  # no temporary file left beside it


def test_a_new_file_gets_the_umask_mode(root: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write(root / "made.py", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / "made.py").stat().st_mode) == 0o640


def test_a_file_changed_since_the_plan_is_not_overwritten(root: Path) -> None:
    changes = plan_changes(parse_edits(block("    return a + b\n", "    pass\n")), root)
    (root / "calc.py").write_text(CALC + "# mine\n")
    with pytest.raises(
        EditError, match=re.escape("calc.py changed on disk since the diff was made")
    ):
        write_changes(changes)
    assert (root / "calc.py").read_text() == CALC + "# mine\n"


def test_a_failed_write_puts_back_the_files_already_written(root: Path) -> None:
    (root / "blocker").write_text("a file where a folder would have to be\n")
    changes = [
        FileChange("calc.py", root / "calc.py", CALC, "changed\n"),
        FileChange("blocker/new.py", root / "blocker" / "new.py", None, "new\n"),
    ]
    with pytest.raises(EditError, match=r"cannot write blocker/new\.py: .*no file was changed"):
        write_changes(changes)
    assert (root / "calc.py").read_text() == CALC
    assert listing(root) == ["blocker", "calc.py"]


def test_a_failed_rename_leaves_no_temporary_file(root: Path) -> None:
    (root / "folder").mkdir()
    (root / "folder" / "inside").write_text("x\n")
    with pytest.raises(OSError):
        atomic_write(root / "folder", "text\n")  # a file cannot replace a folder
    assert listing(root) == ["calc.py", "folder", "folder/inside"]


def test_a_removal_undoes_a_creation(root: Path) -> None:
    (root / "new.py").write_text("x\n")
    write_changes([FileChange("new.py", root / "new.py", "x\n", None)])
    assert listing(root) == ["calc.py"]


def test_a_block_after_another_on_its_file_is_matched_against_the_edited_text(
    root: Path,
) -> None:
    answer = block("    return a + b\n", "    return b + a\n") + block("    return a + b\n", "x\n")
    with pytest.raises(EditError) as failed:
        plan_changes(parse_edits(answer), root)
    (problem,) = failed.value.problems
    assert problem.startswith("block 2 ")
    assert problem.endswith("(in the file as the blocks before this one leave it)")
