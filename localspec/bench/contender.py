"""What every benchmarked mode provides, and the records the runner keeps.

A contender is one mode ready to run: localspec's engine in some speculation mode, or a
baseline (llama-cpp-python's prompt lookup, a llama-server process). All of them take the
same prompt tokens and token budget and report the same few numbers, so the runner and the
report never need to know which is which.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from localspec.bench.modes import Mode
from localspec.bench.workloads import Workload
from localspec.speculative.sources import Span
from localspec.speculative.stats import AcceptanceFigures


@dataclass(frozen=True)
class Prompt:
    """A workload rendered to tokens once, so every mode sees exactly the same input."""

    workload: Workload
    tokens: list[int]
    route: str  # the tuner's route for auto mode ("complete" or "infill")
    regions: tuple[Span, ...] = ()  # a FIM prompt's suffix and extra chunks


@dataclass
class Measured:
    """One generation as a contender reports it.

    `target_steps` counts target forward passes after the prompt; baselines that do not
    count them report `generated - accepted`, which is what each step yielding its accepted
    draft plus one token of its own implies. `peak_rss_bytes` is filled in by contenders
    running outside this process; the runner measures in-process ones itself.
    """

    tokens: list[int]
    tokens_per_second: float
    drafted: int = 0
    accepted: int = 0
    target_steps: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    peak_rss_bytes: int | None = None


class Contender(Protocol):
    mode: Mode
    in_process: bool
    constrains: bool  # applies a workload's output constraint (else it skips those workloads)

    def run(self, prompt: Prompt, max_tokens: int) -> Measured: ...

    def close(self) -> None: ...


class ContenderError(Exception):
    """A baseline broke during the run (its server died, an HTTP error): the runner reports
    the mode as skipped with this message and carries on with the others."""


@dataclass(frozen=True)
class Skipped:
    """A mode or workload that was asked for but not measured, and why: never dropped silently."""

    name: str
    reason: str


@dataclass
class Sample(AcceptanceFigures):
    """One timed run: the row the report aggregates and `--json` writes out."""

    mode: str
    workload: str
    category: str
    repeat: int  # which pass over the prompts; `off`'s run in the same one is its pair
    position: int  # where it ran among the modes on its prompt in its repeat, from 0
    tokens: list[int]
    tokens_per_second: float
    drafted: int
    accepted: int
    target_steps: int
    peak_rss_bytes: int | None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record.update(
            generated_tokens=len(self.tokens),
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
        )
        return record
