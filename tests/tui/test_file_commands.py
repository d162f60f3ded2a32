"""What the prompt box reads as file commands, mentions and paths to complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.file_commands import Command, complete_path, mentions, parse_command, path_fragment


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/add a.py b.py", Command("add", ("a.py", "b.py"))),
        ("  /add @a.py '@diff' 'my file.txt'\n", Command("add", ("a.py", "@diff", "my file.txt"))),
        ("/drop", Command("drop", ())),
        ("/files", Command("files", ())),
        ("/add 'unclosed", Command("add", ("'unclosed",))),
        ("/usr/bin is where?", None),
        ("/additional thoughts", None),
        ("please /add a.py", None),
    ],
)
def test_only_the_three_commands_at_the_start_are_commands(
    text: str, command: Command | None
) -> None:
    assert parse_command(text) == command


def test_mentions_are_at_words_without_trailing_punctuation() -> None:
    text = "Compare @src/a.py and @b.py. Also @diff, mail me@example.com, @a.py again, (@c.rs)"
    assert mentions(text) == ["src/a.py", "b.py", "@diff", "a.py", "c.rs"]
    assert mentions("@dataclass\nclass X: ...") == ["dataclass"]  # the caller checks it exists


@pytest.mark.parametrize(
    ("before", "fragment"),
    [
        ("look at @src/ma", ("src/ma", True)),
        ("@", ("", True)),
        ("/add a.py sr", ("sr", False)),
        ("/drop @b", ("b", True)),  # an @ word: @diff is a candidate too
        ("/add ", ("", False)),
        ("no mention here", None),
        ("mail me@exa", None),
        ("/files x", None),
    ],
)
def test_the_path_being_typed_is_found_before_the_cursor(
    before: str, fragment: tuple[str, bool] | None
) -> None:
    assert path_fragment(before) == fragment


def test_completion_extends_to_what_all_candidates_share(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("")
    (tmp_path / "src" / "model.py").write_text("")
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / ".env").write_text("")
    (tmp_path / "__pycache__").mkdir()
    assert complete_path(tmp_path, "sr") == "c/"  # the one folder gets its slash
    assert complete_path(tmp_path, "src/m") == ""  # main.py and model.py share only "m"
    assert complete_path(tmp_path, "src/ma") == "in.py"
    assert complete_path(tmp_path, "s") == ""  # src/ and setup.cfg
    assert complete_path(tmp_path, "") == ""
    assert complete_path(tmp_path, "nothing") == ""
    assert complete_path(tmp_path, ".e") == "nv"  # hidden names once a dot is typed
    assert complete_path(tmp_path, "__py") == ""  # caches are never offered
    assert complete_path(tmp_path, "di") == ""
    assert complete_path(tmp_path, "di", mention=True) == "ff"  # @diff
    # nothing outside the working directory is listed
    assert complete_path(tmp_path / "src", "../se") == ""
    assert complete_path(tmp_path, "/et") == ""
