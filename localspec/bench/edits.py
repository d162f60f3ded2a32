"""The edit bench: each task's change request answered as the chat and `complete --apply`
ask for it, the answer's blocks applied, and the edited file checked.

Both surfaces build one prompt (`edits.prompt.system_message`: the format, its example naming
the file, then the file; the request as the user's message), which `edit_messages` builds
the same way; a test pins the three to one text. Each task runs in every variant (each mode,
with the edit grammar and without it), in an order shuffled per task from a seed, greedy, so
a rerun gives the same answers. An answer is *applied* when its blocks change the task's file
(read leniently where the chat would show the reading before writing: counted apart), and
*correct* when the task's check passes on the result. Nothing is written outside a temporary
folder per answer.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from localspec.bench.edit_tasks import EditTask, check
from localspec.bench.modes import Mode
from localspec.constraints.constraint import Constraint
from localspec.context_files import ContextFile, language_for
from localspec.edits import parse_edits, plan_changes, system_message
from localspec.edits.grammar import edit_grammar
from localspec.errors import EditError, UsageError
from localspec.messages import Message
from localspec.paths import write_private
from localspec.runtime import Runtime
from localspec.speculative.engine import Finished, GenerationRequest
from localspec.speculative.settings import SpecSettings

APPLIED = "applied"
LENIENT = "applied leniently"  # the chat shows what it assumed before `a` writes it
NO_BLOCKS = "no blocks"
MALFORMED = "malformed"
NOT_APPLIED = "did not apply"
OTHER_FILE = "changed another file"
UNCHANGED = "changed nothing"  # every block's REPLACE is its SEARCH


@dataclass(frozen=True)
class Variant:
    mode: Mode  # one of localspec's own modes: refused otherwise
    constrained: bool

    def __post_init__(self) -> None:
        if self.mode.spec is None:
            raise UsageError(f"the edit bench runs localspec's --spec modes, not {self.mode.name}")

    @property
    def name(self) -> str:
        return f"{self.mode.name}{' +grammar' if self.constrained else ''}"

    @property
    def spec(self) -> SpecSettings:
        assert self.mode.spec is not None  # refused when made
        return self.mode.spec


@dataclass(frozen=True)
class EditRun:
    """One answer to one task in one variant."""

    task: str
    language: str
    variant: str
    outcome: str
    correct: bool
    reason: str  # why the answer was not applied or not right ("" when it was)
    tokens: int
    tokens_per_second: float
    drafted: int
    accepted: int
    finish_reason: str
    answer: str


def edit_context(task: EditTask) -> list[ContextFile]:
    """The task's file as `@path`, `/add` and `--file` show it: its name, text and language."""
    return [ContextFile(task.path, task.source, language_for(task.path))]


def edit_messages(task: EditTask, files: Sequence[ContextFile] | None = None) -> list[Message]:
    """The chat's messages for the task, with no system prompt of the user's: the one the
    chat sends after `@path` and the request (`--file path --apply` sends the same); `files`
    is the task's `edit_context` where the caller has it already."""
    system = system_message("", edit_context(task) if files is None else files, edits=True)
    return [Message("system", system), Message("user", task.request)]


def read_answer(task: EditTask, answer: str) -> tuple[str, str | None, str]:
    """The answer applied to the task's file in a folder of its own: the outcome, the file's
    text after it (None where nothing applied) and why not."""
    with tempfile.TemporaryDirectory(prefix="localspec-edits-") as folder:
        root = Path(folder)
        write_private(root / task.path, task.source, own_folder=False)
        try:
            edits = parse_edits(answer, [task.path])
        except EditError as exc:
            return MALFORMED, None, "; ".join(exc.problems)[:200]
        if not edits:
            return NO_BLOCKS, None, "the answer has no edits: no blocks, no whole file"
        try:
            changes = plan_changes(edits, root, [task.path])
        except EditError as exc:
            return NOT_APPLIED, None, "; ".join(exc.problems)[:200]
    if not changes:
        return UNCHANGED, None, "every block's REPLACE is its SEARCH"
    mine = [change for change in changes if change.path == task.path]
    if not mine or mine[0].after is None:
        return OTHER_FILE, None, ", ".join(change.path for change in changes)
    return (LENIENT if any(c.assumed for c in changes) else APPLIED), mine[0].after, ""


def answer_task(runtime: Runtime, task: EditTask, variant: Variant, max_tokens: int) -> EditRun:
    """Generate the task's answer in `variant`, apply it and check the result."""
    files = edit_context(task)
    constraint = Constraint.lark(edit_grammar(files)) if variant.constrained else None
    request = GenerationRequest(
        prompt=runtime.prompts.chat_prompt(edit_messages(task, files)),
        max_tokens=max_tokens,
        spec=variant.spec,
        route="chat",
        constraint=constraint,
    )
    events = [event for event in runtime.generate(request) if isinstance(event, Finished)]
    if not events:
        raise RuntimeError("generation ended without a Finished event")
    finished = events[-1]
    answer = finished.text
    outcome, after, reason = read_answer(task, answer)
    verdict = check(task, after) if after is not None else None
    stats = finished.stats
    return EditRun(
        task=task.id,
        language=task.language,
        variant=variant.name,
        outcome=outcome,
        correct=verdict is not None and verdict.correct,
        reason=reason if verdict is None else verdict.reason,
        tokens=len(finished.tokens),
        tokens_per_second=stats.tokens_per_second,
        drafted=stats.drafted,
        accepted=stats.accepted,
        finish_reason=finished.finish_reason,
        answer=answer,
    )


def run_edits(
    runtime: Runtime,
    tasks: Sequence[EditTask],
    variants: Sequence[Variant],
    max_tokens: int,
    *,
    seed: int = 0,
    progress: Callable[[str], object] = lambda _: None,
) -> list[EditRun]:
    """Every task in every variant, the variants of one task back to back in a shuffled
    order (no variant always runs first, right after the task's prompt was processed)."""
    order = random.Random(seed)
    runs: list[EditRun] = []
    for number, task in enumerate(tasks, 1):
        shuffled = list(variants)
        order.shuffle(shuffled)
        for variant in shuffled:
            run = answer_task(runtime, task, variant, max_tokens)
            verdict = "correct" if run.correct else run.reason or run.outcome
            progress(f"[{number}/{len(tasks)}] {task.id} {variant.name}: {run.outcome}, {verdict}")
            runs.append(run)
    return runs


def as_records(runs: Sequence[EditRun]) -> list[dict[str, Any]]:
    return [asdict(run) for run in runs]
