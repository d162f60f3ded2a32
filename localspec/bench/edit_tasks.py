"""The edit bench's tasks: a small file, a change request, and a check that the edited file is
right.

A task is one `[[task]]` table of a TOML file (the shipped one is `workloads/edits.toml`): the
file's `path` and `source`, the user's `request`, one right result (`solution`, which the
tests check against the check, so that a check that cannot pass, or cannot fail, is caught),
and the check itself: a `test` program run beside the edited file with the language's own
tool (Python, Node, gcc, bash), `contains`/`lacks` regular expressions, or both. JSON and TOML
files must also still parse. Checks run in a folder of their own with a time limit: the file
is the model's, and a test of it may loop.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from localspec.context_files import read_text_file
from localspec.errors import UsageError
from localspec.paths import write_private

SHIPPED = "edits.toml"
CHECK_TIMEOUT_S = 30.0  # a hang guard: the checks take well under a second here
# how each language's `test` runs: the test's file name and the command (None: no test)
_RUNNERS: dict[str, tuple[str, tuple[str, ...]] | None] = {
    # -E -s: no PYTHON* variables, no user site; the test's folder stays on the path
    "python": ("check_edit.py", (sys.executable, "-E", "-s", "check_edit.py")),
    "javascript": ("check_edit.js", ("node", "check_edit.js")),
    "c": ("check_edit.c", ("gcc", "-std=c11", "-Wall", "-o", "check_edit", "check_edit.c")),
    "shell": ("check_edit.sh", ("bash", "check_edit.sh")),
    "json": None,
    "toml": None,
    "yaml": None,
    "markdown": None,
    "go": None,
    "rust": None,
    "html": None,
    "css": None,
    "sql": None,
}
LANGUAGES = tuple(_RUNNERS)


@dataclass(frozen=True)
class EditTask:
    id: str
    language: str
    path: str  # the file's name, as the model sees it
    request: str
    source: str
    solution: str
    test: str = ""
    contains: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        texts = (self.id, self.language, self.path, self.request, self.source, self.solution)
        if not all(isinstance(text, str) for text in (*texts, self.test)):
            raise ValueError(
                f"{self.id}: id, language, path, request, source, solution and test are strings"
            )
        if not all(isinstance(p, str) for p in (*self.contains, *self.lacks)):
            raise ValueError(f"{self.id}: contains and lacks are lists of strings")
        if self.language not in _RUNNERS:
            raise ValueError(f"{self.id}: language must be one of {', '.join(LANGUAGES)}")
        if self.test and _RUNNERS[self.language] is None:
            raise ValueError(f"{self.id}: a {self.language} task checks by patterns, not a test")
        if not (self.test or self.contains or self.lacks):
            raise ValueError(f"{self.id}: a task needs a test, contains or lacks")
        if Path(self.path).name != self.path or self.path.startswith("."):
            raise ValueError(f"{self.id}: path must be a plain file name")
        if Path(self.path).stem == "check_edit":
            raise ValueError(f"{self.id}: check_edit.* is the name of the check's own files")
        for pattern in (*self.contains, *self.lacks):
            re.compile(pattern, re.MULTILINE)

    def needs(self) -> str | None:
        """The program the check runs that is not installed here, or None."""
        runner = _RUNNERS[self.language]
        if not self.test or runner is None:
            return None
        program = runner[1][0]
        return None if shutil.which(program) else program


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str = ""  # why not, in one line


def load_tasks(path: Path | None = None) -> list[EditTask]:
    """The tasks of `path` (default: the shipped file), each checked as it is read."""
    if path is None:
        text = resources.files("localspec.workloads").joinpath(SHIPPED).read_text("utf-8")
        where = SHIPPED
    else:
        text, where = read_text_file(path, f"--tasks {path}"), str(path)
    try:
        tables = tomllib.loads(text).get("task", [])
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not TOML: {exc}") from exc
    tasks = [_task(where, table) for table in tables]
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        raise UsageError(f"{where}: task ids must be unique")
    if not tasks:
        raise UsageError(f"{where} holds no [[task]]")
    return tasks


def _task(where: str, table: Any) -> EditTask:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: every task must be a table")
    known = set(EditTask.__dataclass_fields__)
    unknown = sorted(set(table) - known)
    if unknown:
        raise UsageError(f"{where}: task {table.get('id')!r} has unknown keys: {unknown}")
    try:
        values: dict[str, Any] = {
            key: tuple(value) if key in ("contains", "lacks") else value
            for key, value in table.items()
        }
        return EditTask(**values)
    except (TypeError, ValueError, re.error) as exc:
        raise UsageError(f"{where}: {exc}") from exc


def check(task: EditTask, text: str) -> Verdict:
    """Whether `text`, the task's file after the edit, is right."""
    if text == task.source:
        return Verdict(False, "unchanged")
    parsed = _parses(task.language, text)
    if parsed:
        return Verdict(False, parsed)
    for pattern in task.contains:
        if not re.search(pattern, text, re.MULTILINE):
            return Verdict(False, f"lacks /{pattern}/")
    for pattern in task.lacks:
        if re.search(pattern, text, re.MULTILINE):
            return Verdict(False, f"still has /{pattern}/")
    if task.test:
        return _run_test(task, text)
    return Verdict(True)


def _parses(language: str, text: str) -> str:
    """Why a JSON or TOML file no longer parses ("" when it does, or is neither)."""
    try:
        if language == "json":
            json.loads(text)
        elif language == "toml":
            tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        return f"not {language} any more: {exc}"
    return ""


def _run_test(task: EditTask, text: str) -> Verdict:
    runner = _RUNNERS[task.language]
    assert runner is not None  # checked when the task was made
    name, command = runner
    with tempfile.TemporaryDirectory(prefix="localspec-edit-") as folder:
        work = Path(folder)
        write_private(work / task.path, text, own_folder=False)
        write_private(work / name, task.test, own_folder=False)
        steps = [command] + ([("./check_edit",)] if task.language == "c" else [])
        for step in steps:
            failed = _run(step, work)
            if failed:
                return Verdict(False, failed)
    return Verdict(True)


def _run(command: tuple[str, ...], work: Path) -> str:
    """Run one step of a check in `work`; why it failed, "" when it passed."""
    try:
        done = subprocess.run(
            command,
            cwd=work,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the test ran past {CHECK_TIMEOUT_S:.0f} s"
    if done.returncode == 0:
        return ""
    return f"{command[0]} exited {done.returncode}: {_why(done.stderr or done.stdout)}"[:200]


def _why(output: str) -> str:
    """The line of a failed step's output that says why: the last that names an error (Node
    ends with its version, gcc with the caret under the error), else the last line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    named = [line for line in lines if "error" in line.lower() or "assert" in line.lower()]
    return (named or lines or [""])[-1]
