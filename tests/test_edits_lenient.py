"""Lenient readings of edits (issue 48): the shapes the default 1.5B model really wrote in the
chat, each read as what it unambiguously means, with what was assumed said, and never a write
outside the files the model was shown."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from localspec.edits import EditError, lenient, parse, parse_edits, plan_changes
from localspec.edits.parse import UNFENCED
from localspec.edits.parts import answer_parts
from tests.test_edits_hostile import files

ANSWER_PY = "def add(a, b):\n    return a + b\n\n\nprint(add(20, 18))\n"
STORE_PY = (
    'import json\n\n\ndef save(path, data):\n    with open(path, "w") as f:\n'
    "        json.dump(data, f)\n"
)
# "Why does this print 38 instead of 42? Fix it.": SEARCH, a fenced block, =======, a fenced
# block, >>>>>>> REPLACE (the chat found no block and rendered seven nested quotes)
FENCED_SHAPE = (
    "The second argument should be 22, not 18.\n\nSEARCH\n```python\nprint(add(20, 18))\n```\n"
    "=======\n```python\nprint(add(20, 22))\n```\n>>>>>>> REPLACE\n"
)
# "Make save write the JSON with indent=2.": the format's placeholder path, SEARCH without the
# file's 8 spaces (F6 said "path/to/store.py does not exist")
PLACEHOLDER_SHAPE = (
    "Pass indent=2 to json.dump.\n\npath/to/store.py\n```python\n<<<<<<< SEARCH\n"
    "json.dump(data, f)\n=======\njson.dump(data, f, indent=2)\n>>>>>>> REPLACE\n```\n"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "answer.py").write_text(ANSWER_PY)
    (folder / "store.py").write_text(STORE_PY)
    return folder


def _assumed(root: Path, answer: str, context: list[str]) -> tuple[str, list[str]]:
    """The one file the answer changes, its new text, and what was assumed."""
    (change,) = plan_changes(parse_edits(answer, context), root, context)
    assert change.after is not None
    return change.after, list(change.assumed)


def test_a_search_in_fences_of_its_own_without_its_marker_or_file_is_read(root: Path) -> None:
    after, assumed = _assumed(root, FENCED_SHAPE, ["answer.py"])
    assert after == ANSWER_PY.replace("18))", "22))")
    assert assumed == [
        "block 1 (answer line 3): `SEARCH` read as the `<<<<<<< SEARCH` marker",
        "block 1 (answer line 3): the block names no file: read as answer.py, the only file given",
        f"block 1 (answer line 3): {UNFENCED}",
    ]


def test_the_placeholder_path_and_a_search_without_indentation_are_read(root: Path) -> None:
    after, assumed = _assumed(root, PLACEHOLDER_SHAPE, ["store.py"])
    assert after == STORE_PY.replace("(data, f)", "(data, f, indent=2)")
    assert assumed == [
        "block 1 (answer line 5): path/to/store.py names no file: read as store.py, the one "
        "file of that name",
        "block 1 (answer line 5): SEARCH matches line 6 only when leading white space is "
        "ignored: applied indented 8 spaces as the file is there",
    ]


def test_the_format_s_example_path_means_the_only_file(root: Path) -> None:
    answer = PLACEHOLDER_SHAPE.replace("path/to/store.py", "path/to/file.py")
    after, assumed = _assumed(root, answer, ["store.py"])
    assert "indent=2" in after
    assert "path/to/file.py is the format's example path: read as store.py" in assumed[0]


def test_a_block_that_lost_its_opening_marker_is_read_from_its_fence(root: Path) -> None:
    answer = (
        "store.py\n```python\n        json.dump(data, f)\n=======\n"
        "        json.dump(data, f, indent=2)\n>>>>>>> REPLACE\n```\n"
    )
    after, assumed = _assumed(root, answer, ["store.py"])
    assert after == STORE_PY.replace("(data, f)", "(data, f, indent=2)")
    assert assumed == [
        "block 1 (answer line 3): the block has no `<<<<<<< SEARCH` line: SEARCH read from "
        "line 3 on"
    ]


def test_a_strict_block_assumes_nothing(root: Path) -> None:
    answer = PLACEHOLDER_SHAPE.replace("path/to/", "").replace("json.dump(", "        json.dump(")
    after, assumed = _assumed(root, answer, ["store.py"])
    assert "indent=2" in after and assumed == []


@pytest.mark.parametrize(
    ("answer", "context", "problem"),
    [
        # two files of that name: which one is not said
        (PLACEHOLDER_SHAPE, ["store.py", "old/store.py"], "path/to/store.py does not exist"),
        # the placeholder with two files: no one file it must mean
        (
            PLACEHOLDER_SHAPE.replace("store.py", "file.py"),
            ["store.py", "answer.py"],
            "path/to/file.py does not exist",
        ),
        # no file given at all: a block that names none is still refused
        (FENCED_SHAPE.replace("SEARCH", "<<<<<<< SEARCH"), [], "names no file"),
    ],
    ids=["two-alike", "placeholder-of-two", "no-context"],
)
def test_an_ambiguous_reading_is_refused(
    root: Path, answer: str, context: list[str], problem: str
) -> None:
    (root / "old").mkdir()
    (root / "old" / "store.py").write_text(STORE_PY)
    before = files(root)
    with pytest.raises(EditError, match=re.escape(problem)):
        plan_changes(parse_edits(answer, context), root, context)
    assert files(root) == before


def test_a_search_found_twice_but_for_indentation_is_refused(root: Path) -> None:
    (root / "store.py").write_text(STORE_PY + "\n\ndef again(f, data):\n    json.dump(data, f)\n")
    with pytest.raises(EditError, match=re.escape("not in store.py exactly")):
        plan_changes(parse_edits(PLACEHOLDER_SHAPE, ["store.py"]), root, ["store.py"])


def test_a_path_that_names_a_file_is_that_file(root: Path) -> None:
    """The base name decides only for a path that names no file: an existing file is never
    swapped for a context file of the same name."""
    (root / "sub").mkdir()
    (root / "sub" / "store.py").write_text(STORE_PY)
    answer = PLACEHOLDER_SHAPE.replace("path/to/store.py", "store.py")
    (change,) = plan_changes(parse_edits(answer, ["sub/store.py"]), root, ["sub/store.py"])
    assert change.path == "store.py"


@pytest.mark.parametrize("context", [["../outside/store.py"], [".git/store.py"]])
def test_a_lenient_path_never_leaves_the_allowed_files(root: Path, context: list[str]) -> None:
    """A context file outside the working folder, or in .git, is no file a reading may mean."""
    (root.parent / "outside").mkdir()
    (root.parent / "outside" / "store.py").write_text(STORE_PY)
    (root / ".git").mkdir()
    (root / ".git" / "store.py").write_text(STORE_PY)
    (root / "store.py").unlink()
    before = files(root.parent)
    with pytest.raises(EditError, match=re.escape("path/to/store.py does not exist")):
        plan_changes(parse_edits(PLACEHOLDER_SHAPE, context), root, context)
    assert files(root.parent) == before


def test_fences_that_are_the_file_s_own_are_kept(root: Path) -> None:
    """A Markdown file's own fences match as written: the block is not read without them."""
    readme = "# Use\n\n```sh\nmake\n```\n"
    (root / "README.md").write_text(readme)
    answer = (
        "README.md\n<<<<<<< SEARCH\n```sh\nmake\n```\n=======\n```console\nmake\n```\n"
        ">>>>>>> REPLACE\n"
    )
    after, assumed = _assumed(root, answer, ["README.md"])
    assert after == readme.replace("```sh", "```console") and assumed == []


def test_a_search_word_in_prose_is_no_block() -> None:
    answer = "Use the search box:\nSEARCH\nthen type the name.\n"
    assert parse_edits(answer, ["store.py"]) == []


def test_the_transcript_parts_of_the_real_shapes() -> None:
    """The chat renders each block as an edit and the prose around it as Markdown."""
    kinds = [(p.kind, p.text) for p in answer_parts(FENCED_SHAPE, ["answer.py"])]
    assert kinds == [
        ("text", "The second argument should be 22, not 18.\n\n"),
        ("edit", FENCED_SHAPE.split("\n\n", 1)[1]),
    ]
    parts = answer_parts(PLACEHOLDER_SHAPE + "\nDone.\n", ["store.py"])
    assert [p.kind for p in parts] == ["text", "edit", "text"]
    assert parts[1].text.startswith("path/to/store.py\n```python\n")
    assert parts[1].text.endswith(">>>>>>> REPLACE\n```\n")
    cut = "calc.py\n```python\n<<<<<<< SEARCH\na\n=======\nb\n"
    (malformed,) = answer_parts(cut)
    assert (malformed.kind, malformed.text) == ("malformed", cut)
    assert malformed.problem is not None and "no `>>>>>>> REPLACE` line" in malformed.problem


def test_looking_past_indentation_compares_a_bounded_number_of_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file of the same line over and over and a SEARCH that matches every window but its
    last line: every window would be compared almost whole; past the budget, none is read."""
    compared: list[int] = []
    shift = lenient._shift

    def counted(lines: Sequence[str], row: int, wanted: Sequence[str]) -> tuple[str | None, int]:
        found = shift(lines, row, wanted)
        compared.append(found[1])
        return found

    monkeypatch.setattr(lenient, "_shift", counted)
    monkeypatch.setattr(lenient, "BUDGET", 50_000)
    text = "    x\n" * 20_000
    assert lenient.reindented(text, "x\n" * 500 + "y\n", "z\n") is None
    assert sum(compared) <= 50_000 + 501
    assert len(compared) < 20_000 - 500  # it stopped before the last window


def test_a_run_of_bare_search_lines_is_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model looping on "SEARCH" must not make each of those lines scan the rest."""
    seen: list[str] = []
    divider = parse.DIVIDER

    class Counting:
        @staticmethod
        def match(line: str) -> re.Match[str] | None:
            seen.append(line)
            return divider.match(line)

    monkeypatch.setattr(parse, "DIVIDER", Counting)
    assert parse_edits("SEARCH\n" * 5_000, ["store.py"]) == []
    assert len(seen) <= 3 * 5_000
