"""The edit grammar over the real pair's vocabulary (152k tokens), which the tiny models'
cannot stand in for: llguidance gave up on the first grammar ("too many expressions
constructed") over Qwen's vocabulary only, so every `/edit` failed with the default pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.bench.edit_tasks import load_tasks
from localspec.bench.edits import APPLIED, Variant, answer_task, edit_context
from localspec.bench.modes import parse_mode
from localspec.constraints.constraint import Constraint
from localspec.edits.grammar import edit_grammar
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def runtime(pair_paths: tuple[Path, Path]) -> Iterator[Runtime]:
    target, _ = pair_paths
    with Runtime(RuntimeSettings(target=target, n_ctx=2048)) as loaded:
        yield loaded


def test_every_shipped_task_s_grammar_compiles_over_the_real_vocabulary(runtime: Runtime) -> None:
    for task in load_tasks():
        runtime.check_constraint(Constraint.lark(edit_grammar(edit_context(task))))


def test_a_constrained_answer_applies(runtime: Runtime) -> None:
    task = next(task for task in load_tasks() if task.language == "python")
    run = answer_task(runtime, task, Variant(parse_mode("off"), constrained=True), 512)
    assert run.finish_reason == "stop", run.answer
    assert run.outcome == APPLIED, (run.reason, run.answer)
