"""`localspec bench edits`: the answer read as the chat reads it, applied in a folder of its
own and checked; the prompt is the one the chat and `complete --apply` send; the command on the
tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.bench.edit_tasks import EditTask, load_tasks
from localspec.bench.edits import (
    APPLIED,
    LENIENT,
    MALFORMED,
    NO_BLOCKS,
    NOT_APPLIED,
    OTHER_FILE,
    UNCHANGED,
    EditRun,
    edit_messages,
    read_answer,
)
from localspec.bench.edits_report import format_edit_report
from localspec.cli.bench_edits import variants
from localspec.cli.bench_parser import GRAMMAR_CHOICES
from localspec.cli.complete import with_files
from localspec.cli.parser import build_parser
from localspec.errors import UsageError
from localspec.messages import Message
from tests.test_cli import localspec

STORE = (
    "import json\n\n\nclass Store:\n    def save(self, path, data):\n"
    "        with open(path, 'w') as f:\n            json.dump(data, f)\n"
)
TASK = EditTask(
    id="store-indent",
    language="python",
    path="store.py",
    request="Make save write the JSON with indent=2.",
    source=STORE,
    solution=STORE.replace("json.dump(data, f)", "json.dump(data, f, indent=2)"),
    contains=(r"indent\s*=\s*2",),
)


def _block(path: str, search: str, replace: str) -> str:
    return f"{path}\n```python\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


def test_the_bench_sends_what_complete_apply_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chat sends what `complete --file F --apply` sends (pinned in tests/tui/test_files);
    the bench's messages are those, so its figures are the chat's construction."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / TASK.path).write_text(TASK.source, encoding="utf-8")
    args = build_parser().parse_args(["complete", "--file", TASK.path, "--apply", TASK.request])
    prompt = with_files(args, TASK.request, fim=False)
    assert edit_messages(TASK) == [Message("system", args.system), Message("user", prompt)]


def test_an_answer_is_read_as_the_chat_reads_it() -> None:
    """The shapes of issue 48: a right block, a SEARCH without the file's indentation (read
    leniently, as the chat shows before writing), the placeholder path, and the failures."""
    line = "            json.dump(data, f)\n"
    fixed = "            json.dump(data, f, indent=2)\n"
    right = "Add indent.\n\n" + _block("store.py", line, fixed)
    outcome, after, reason = read_answer(TASK, right)
    assert (outcome, reason) == (APPLIED, "")
    assert after == TASK.solution
    unindented = _block("path/to/store.py", line.lstrip(), fixed.lstrip())
    outcome, after, _ = read_answer(TASK, unindented)
    assert outcome == LENIENT and after == TASK.solution
    assert read_answer(TASK, "It already works.")[0] == NO_BLOCKS
    assert read_answer(TASK, _block("store.py", "nothing like it\n", "x\n"))[0] == NOT_APPLIED
    assert read_answer(TASK, _block("notes.md", "", "a new file\n"))[0] == OTHER_FILE
    assert read_answer(TASK, _block("store.py", line, line))[0] == UNCHANGED
    malformed = "store.py\n```python\n<<<<<<< SEARCH\n" + line + "```\n"
    assert read_answer(TASK, malformed)[0] == MALFORMED


def test_every_shipped_task_is_right_when_answered_with_its_solution() -> None:
    """Each task's way from an answer to a verdict: one block replacing the whole file with the
    task's solution applies and passes the check (a task whose check needs a program that is
    missing here is checked by tests/bench/test_edit_tasks.py, which skips it by name)."""
    for task in load_tasks():
        if task.needs():
            continue
        answer = "The change.\n\n" + _block(task.path, task.source, task.solution)
        outcome, after, reason = read_answer(task, answer)
        assert (outcome, reason) == (APPLIED, ""), task.id
        assert after == task.solution, task.id


def test_the_report_counts_what_the_runs_say() -> None:
    def run(variant: str, outcome: str, correct: bool, finish: str = "stop") -> EditRun:
        return EditRun(
            "t",
            "python",
            variant,
            outcome,
            correct,
            "" if correct else "why",
            10,
            5.0,
            0,
            0,
            finish,
            "",
        )

    runs = [
        run("auto +grammar", APPLIED, True),
        run("auto +grammar", LENIENT, False),
        run("auto", NO_BLOCKS, False, "length"),
        run("auto", APPLIED, True),
    ]
    report = format_edit_report(runs, ["auto +grammar", "auto"])
    assert "| auto +grammar | 2/2 (100%) | 1 | 1/2 (50%) | 0 | 5.0 (5.0-5.0) | 0 / 0 |" in report
    assert "| auto | 1/2 (50%) | 0 | 1/2 (50%) | 1 | 5.0 (5.0-5.0) | 0 / 0 |" in report
    assert "| python | 1/2 | 1/2 |" in report
    assert "- t (auto): no blocks; why" in report


def test_variants_are_localspec_modes_with_and_without_the_grammar() -> None:
    assert [v.name for v in variants("off,auto", GRAMMAR_CHOICES["both"])] == [
        "off +grammar",
        "auto +grammar",
        "off",
        "auto",
    ]
    assert [v.name for v in variants("auto", GRAMMAR_CHOICES["on"])] == ["auto +grammar"]
    assert set(GRAMMAR_CHOICES) == {"both", "on", "off"}
    for refused in ("server-off", "", "lcp-lookup"):
        with pytest.raises(UsageError):
            variants(refused, GRAMMAR_CHOICES["both"])


def test_the_command_on_the_tiny_model(tiny_target: Path, tmp_path: Path) -> None:
    """The tiny model writes noise: its answers apply nowhere, and the command says so per
    answer; under the grammar the noise stays in the explanation's free text."""
    tasks = tmp_path / "tasks.toml"
    tasks.write_text(
        "[[task]]\n"
        f"id = {json.dumps(TASK.id)}\nlanguage = 'python'\npath = 'store.py'\n"
        f"request = {json.dumps(TASK.request)}\nsource = '''{STORE}'''\n"
        f"solution = '''{TASK.solution}'''\ncontains = ['indent']\n",
        encoding="utf-8",
    )
    out = tmp_path / "edits.json"
    result = localspec(
        "bench", "edits", "--target", tiny_target, "--ctx-size", "2048", "--tasks", tasks,
        "--modes", "off", "--max-tokens", "24", "--json", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("| variant | applied |")
    assert "| off +grammar | 0/1 (0%) | 0 | 0/1 (0%) | 1 |" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["settings"]["variants"] == ["off +grammar", "off"]
    assert [run["variant"] for run in doc["runs"]] in (
        ["off +grammar", "off"],
        ["off", "off +grammar"],
    )
    constrained = next(run for run in doc["runs"] if run["variant"] == "off +grammar")
    assert constrained["tokens"] == 24 and constrained["finish_reason"] == "length"
    assert "\n" not in constrained["answer"]  # still in the explanation after 24 tokens
    assert "store-indent off +grammar" in result.stderr  # progress, a line per answer


def test_the_command_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    for args, message in (
        (["--task", "nope"], "no task named nope"),
        (["--modes", "server-off"], "localspec's --spec modes"),
        (["--max-tokens", "0"], "--max-tokens"),
    ):
        result = localspec("bench", "edits", "--offline", *args)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
