"""The edit bench's tasks: the shipped file loads, every check fails on the untouched file and
passes on the task's own solution, and a malformed task file is refused with a UsageError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.bench import edit_tasks
from localspec.bench.edit_tasks import EditTask, check, load_tasks
from localspec.errors import UsageError

SHIPPED = load_tasks()


def test_shipped_tasks_load() -> None:
    assert len(SHIPPED) >= 30
    assert len({task.language for task in SHIPPED}) >= 6


@pytest.mark.parametrize("task", SHIPPED, ids=[task.id for task in SHIPPED])
def test_check_fails_on_source_and_passes_on_solution(task: EditTask) -> None:
    missing = task.needs()
    if missing:
        pytest.skip(f"{missing} is not installed")
    before = check(task, task.source)
    assert not before.correct
    after = check(task, task.solution)
    assert after.correct, after.reason


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(body, encoding="utf-8")
    return path


def _table(task_id: str = "a", extra: str = "", **values: str) -> str:
    fields = {
        "id": task_id,
        "language": "markdown",
        "path": "README.md",
        "request": "Fix the typo.",
        "source": "teh\n",
        "solution": "the\n",
        **values,
    }
    lines = [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
    if "test" not in fields:
        lines.append("lacks = ['teh']")
    return "[[task]]\n" + "\n".join(lines) + "\n" + extra + "\n"


def test_a_small_task_file_loads(tmp_path: Path) -> None:
    [task] = load_tasks(_write(tmp_path, _table()))
    assert task.lacks == ("teh",)
    assert check(task, task.solution).correct


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_table(extra="owner = 'me'"), "unknown keys"),
        (_table("a") + _table("a"), "unique"),
        (_table(test="assert True"), "not a test"),
        (_table(path="docs/README.md"), "plain file name"),
        ("[[task]\nid = 'a'\n", "not TOML"),
    ],
    ids=["unknown-key", "duplicate-id", "test-for-patterns", "path-with-folder", "invalid-toml"],
)
def test_malformed_task_files_are_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_tasks(_write(tmp_path, body))


def test_a_looping_test_is_cut_at_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edit_tasks, "CHECK_TIMEOUT_S", 1)
    task = EditTask(
        id="loops",
        language="python",
        path="spin.py",
        request="Make it spin.",
        source="X = 1\n",
        solution="X = 2\n",
        test="while True:\n    pass\n",
    )
    verdict = check(task, task.solution)
    assert not verdict.correct
    assert "ran past 1 s" in verdict.reason
