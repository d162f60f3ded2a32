"""The edit grammar over the real pair's vocabulary (152k tokens), which the tiny models'
cannot stand in for: llguidance gave up on the first grammar ("too many expressions
constructed") over Qwen's vocabulary only, so every `/edit` failed with the default pair; and
on the first whole-file grammar at the file's first line (its lexer's budget for one token),
which only shows once a mask is computed there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.bench.edit_tasks import EditTask, load_tasks
from localspec.bench.edits import APPLIED, Variant, answer_task, edit_context
from localspec.bench.modes import parse_mode
from localspec.constraints.constraint import Constraint
from localspec.edits.grammar import edit_grammar, rewrites_whole
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.llama.vocab import tokenize_bytes
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime, constraint_compiler

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


def solution_answer(task: EditTask) -> str:
    """The task's right answer in the shape its grammar holds: the file whole, or one block
    from the whole file to the solution."""
    language = edit_context(task)[0].language
    head = f"Make the change asked for.\n\n{task.path}\n```{language}\n"
    if rewrites_whole(edit_context(task)):
        return f"{head}{task.solution}```"
    return f"{head}<<<<<<< SEARCH\n{task.source}=======\n{task.solution}>>>>>>> REPLACE\n```"


def test_each_task_s_right_answer_is_allowed_token_by_token(pair_paths: tuple[Path, Path]) -> None:
    """A mask at every token of every task's right answer, as generation computes them: no
    token refused, and no lexer limit met on the way (which would end the answer there)."""
    with LlamaModel(pair_paths[0], ModelSettings(vocab_only=True)) as model:
        compiler = constraint_compiler(model)
        for task in load_tasks():
            guide = compiler.guide(Constraint.lark(edit_grammar(edit_context(task))))
            for token in tokenize_bytes(model, solution_answer(task).encode()):
                assert guide.allowed([])[token], task.id
                guide.commit([token])
            assert guide.accepting, task.id
