"""`localspec complete --apply` / `--dry-run`.

The tiny models answer with random text, never with a SEARCH/REPLACE block, so the real
command is run for what it does with any answer (the answer on stdout, the model asked for
blocks, refusal when there are none, nothing written) and `apply_answer`, which the command
calls with the answer's text, is run on given answers for what it does with blocks. The real
pair writes a real edit through the whole command in tests/cli/test_apply_real.py.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from localspec.cli.apply import apply_answer
from localspec.cli.complete import edit_answer_length
from localspec.cli.parser import build_parser
from localspec.edits import system_message
from tests.server.conftest import LOCALSPEC

CALC = "def add(a, b):\n    return a + b\n"
ANSWER = (
    "Swap the operands.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a + b\n=======\n"
    "    return b + a\n>>>>>>> REPLACE\n```\n"
)
DIFF = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a + b\n+    return b + a\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "calc.py").write_text(CALC)
    return folder


def complete(
    cwd: Path, *args: str | Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`localspec complete` run in `cwd`, the models loaded in the process."""
    return subprocess.run(
        [LOCALSPEC, "complete", "--no-server", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_apply_writes_the_file_and_prints_the_diff(project: Path) -> None:
    out = io.StringIO()
    assert apply_answer(ANSWER, dry_run=False, root=project, out=out) == 0
    assert out.getvalue() == DIFF
    assert (project / "calc.py").read_text() == CALC.replace("a + b", "b + a")


def test_dry_run_prints_the_diff_and_writes_nothing(project: Path) -> None:
    out = io.StringIO()
    assert apply_answer(ANSWER, dry_run=True, root=project, out=out) == 0
    assert out.getvalue() == DIFF
    assert (project / "calc.py").read_text() == CALC


def test_a_mismatch_prints_one_line_per_failing_block_and_writes_nothing(project: Path) -> None:
    answer = (
        ANSWER.replace("return a + b", "return a+b")
        + ANSWER
        + ANSWER.replace("return a + b", "return a - b")
    )
    out = io.StringIO()
    assert apply_answer(answer, dry_run=False, root=project, out=out) == 1
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "localspec: error: block 1",
        "localspec: error: block 3",
        "localspec: nothing was written",
    ]
    assert (project / "calc.py").read_text() == CALC


def test_a_lenient_reading_is_printed_and_written_only_once_confirmed(project: Path) -> None:
    answer = ANSWER.replace("calc.py", "path/to/calc.py").replace("    return", "return")
    said = [
        "localspec: assumed: block 1 (answer line 5): path/to/calc.py names no file: read as "
        "calc.py, the one file of that name",
        "localspec: assumed: block 1 (answer line 5): SEARCH matches line 2 only when leading "
        "white space is ignored: applied indented 4 spaces as the file is there",
    ]
    asked: list[str] = []

    def refuse(question: str) -> bool:
        asked.append(question)
        return False

    out = io.StringIO()
    assert apply_answer(answer, False, ["calc.py"], project, out, confirm=refuse) == 1
    assert out.getvalue().startswith(DIFF)
    assert out.getvalue().splitlines()[6:8] == said
    assert out.getvalue().endswith("localspec: nothing was written\n")
    assert asked == ["write these edits, read as assumed above?"]
    assert (project / "calc.py").read_text() == CALC
    out = io.StringIO()
    assert apply_answer(answer, False, ["calc.py"], project, out, confirm=lambda _: True) == 0
    assert (project / "calc.py").read_text() == CALC.replace("a + b", "b + a")


def test_an_added_file_may_be_rewritten_whole(project: Path) -> None:
    answer = "calc.py\n```python\ndef add(a, b):\n    return sum((a, b))\n```\n"
    assert apply_answer(answer, dry_run=False, added=["calc.py"], root=project) == 0
    assert "sum((a, b))" in (project / "calc.py").read_text()


def test_the_command_asks_for_blocks_and_refuses_an_answer_without_any(
    project: Path, tiny_target: Path
) -> None:
    common = ("--target", tiny_target, "--max-tokens", "8", "--spec", "off", "--stats")
    # the same prompt as --apply sends without a --system of the user's: the same answer
    asked = complete(project, *common, "-s", system_message("", [], edits=True), "rename add")
    for option in ("--apply", "--dry-run"):
        done = complete(project, *common, option, "rename add")
        assert done.returncode == 1, done.stderr
        assert done.stdout == asked.stdout, done.stderr  # the answer on stdout, as without it
        *_, stats, error, nothing = done.stderr.splitlines()
        assert (
            json.loads(stats)["prompt_tokens"]
            == json.loads(asked.stderr.splitlines()[-1])["prompt_tokens"]
        )
        assert error.startswith("localspec: error: the answer has no edits")
        assert nothing == "localspec: nothing was written"
    assert (project / "calc.py").read_text() == CALC
    assert sorted(p.name for p in project.iterdir()) == ["calc.py"]


def test_a_system_prompt_of_the_users_comes_first_then_the_format(
    project: Path, tiny_target: Path
) -> None:
    """The chat's order: the user's system prompt, then how to write an edit (before, a
    system prompt of the user's left the format out, and no answer could be applied)."""
    common = ("--target", tiny_target, "--max-tokens", "4", "--spec", "off", "--stats")
    system = system_message("Be brief.", [], edits=True)
    assert system.startswith("Be brief.\n\nTo change the user's files, answer with SEARCH")
    plain = complete(project, *common, "-s", system, "rename add")
    applied = complete(project, *common, "-s", "Be brief.", "--apply", "rename add")
    before, after = (json.loads(r.stderr.splitlines()[0]) for r in (plain, applied))
    assert before["prompt_tokens"] == after["prompt_tokens"]


@pytest.mark.parametrize(
    ("content", "head"),
    [
        (CALC, "\n\ncalc.py\n```python\n"),
        (CALC * 40, "\n\ncalc.py\n```python\n<<<<<<< SEARCH\n"),
    ],
    ids=["small file: whole", "large file: blocks"],
)
def test_edit_grammar_makes_the_answer_an_edit_of_the_file(
    project: Path, tiny_target: Path, content: str, head: str
) -> None:
    """The tiny model writes noise; under `--edit-grammar` the noise is only where the format
    leaves text free: a small file comes whole after a sentence, a large one's SEARCH is a line
    of it."""
    (project / "calc.py").write_text(content)
    common = ("--target", tiny_target, "--max-tokens", "700", "--spec", "off")
    done = complete(project, *common, "--file", "calc.py", "--dry-run", "--edit-grammar", "go")
    assert head in done.stdout, done.stderr
    first = done.stdout.split(head, 1)[1].split("\n", 1)[0]
    if "SEARCH" in head:
        assert first in CALC.splitlines()
    else:
        assert done.stdout[0].isalpha()  # a sentence starts with a letter
    assert (project / "calc.py").read_text() == content


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (("--edit-grammar", "--file", "calc.py"), "applies to --apply and --dry-run"),
        (("--edit-grammar", "--apply"), "needs a --file with lines to edit"),
        (("--edit-grammar", "--apply", "--file", "calc.py", "--grammar", "g.gbnf"), "one const"),
        (("--edit-grammar", "--apply", "--fim"), "not to --fim"),
    ],
    ids=["no-apply", "no-file", "two-constraints", "fim"],
)
def test_edit_grammar_where_it_cannot_apply_is_refused(
    project: Path, tiny_target: Path, options: tuple[str, ...], problem: str
) -> None:
    (project / "g.gbnf").write_text('root ::= "x"\n')
    done = complete(project, "--target", tiny_target, *options, "go")
    assert done.returncode == 2, done.stderr
    assert problem in done.stderr
    assert (project / "calc.py").read_text() == CALC


@pytest.mark.parametrize(
    ("options", "tokens"),
    [(("--apply",), 512), (("--dry-run",), 512), (("--apply", "--max-tokens", "9"), 9), ((), 256)],
)
def test_an_edit_s_answer_may_be_as_long_as_the_chat_s(
    options: tuple[str, ...], tokens: int
) -> None:
    """A small file comes back whole: 256 tokens, `complete`'s default, would cut it."""
    args = build_parser().parse_args(["complete", *options, "change it"])
    edit_answer_length(args)
    assert args.max_tokens == tokens
