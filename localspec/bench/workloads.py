"""Benchmark workloads: prompts in JSONL, one per line, each tagged with a category.

A chat workload has a `prompt` (sent through the model's chat template); a `fim` workload has
`prefix` and `suffix` (sent as a fill-in-the-middle prompt, the way editors complete code).
A `fim` workload may also carry `extra`, a list of `{"filename", "text"}` chunks of other code
(llama.vim's ring of chunks from the files around the cursor), sent as the FIM prompt's extra
context the way editors send it.
Categories matter because speculation pays off very differently on them: edits that copy the
input, generation from scratch, prose, completion in the middle of a file, JSON. A workload
may carry a `constraint` its output must match, one of `{"json_schema": {...}}`,
`{"json_object": true}`, `{"regex": "..."}`, `{"gbnf": "..."}` or `{"lark": "..."}`: every
localspec mode then generates under it (the `json-schema` category).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from localspec.constraints.constraint import KINDS, Constraint
from localspec.context_files import read_text_file
from localspec.errors import UsageError
from localspec.fim import ExtraChunk

FIM = "fim"


@dataclass(frozen=True)
class Workload:
    id: str
    category: str
    prompt: str = ""
    prefix: str = ""
    suffix: str = ""
    constraint: dict[str, Any] | None = None
    # JSON gives a list of {"filename", "text"} objects; kept as chunks
    extra: tuple[ExtraChunk, ...] = ()

    def __post_init__(self) -> None:
        if self.category == FIM and not (self.prefix or self.suffix):
            raise ValueError(f"{self.id}: a fim workload needs prefix and suffix")
        if self.extra and self.category != FIM:
            raise ValueError(f"{self.id}: only a fim workload takes extra chunks")
        object.__setattr__(self, "extra", tuple(_chunk(self.id, c) for c in self.extra))
        if self.category != FIM and not self.prompt:
            raise ValueError(f"{self.id}: a {self.category} workload needs a prompt")
        if self.constraint is not None:
            self.output_constraint()  # a malformed one fails when the file is read

    def output_constraint(self) -> Constraint | None:
        """The constraint the output must match (its schema or grammar is checked later,
        against the model's vocabulary, by `Runtime.check_constraint`)."""
        if self.constraint is None:
            return None
        if not isinstance(self.constraint, dict) or len(self.constraint) != 1:
            raise ValueError(f"{self.id}: constraint must be an object with one key")
        [(kind, source)] = self.constraint.items()
        if kind == "json_object":
            return Constraint.json_object()
        if kind == "json_schema" and isinstance(source, dict | bool):
            return Constraint("json_schema", json.dumps(source))
        if kind in KINDS and isinstance(source, str):
            return Constraint(kind, source)
        raise ValueError(
            f"{self.id}: constraint {kind!r} must be one of {', '.join(KINDS)}, with a schema "
            f"object for json_schema and the pattern or grammar's text for the others"
        )

    @property
    def is_fim(self) -> bool:
        return self.category == FIM


def _chunk(workload: str, raw: object) -> ExtraChunk:
    """One extra chunk from its JSON object (or an already built chunk)."""
    if isinstance(raw, ExtraChunk):
        return raw
    if isinstance(raw, dict) and isinstance(raw.get("text"), str):
        return ExtraChunk(str(raw.get("filename", "")), raw["text"])
    raise ValueError(f"{workload}: each extra chunk must be an object with a string `text`")


def load_workloads(path: Path | None, shipped: str = "default.jsonl") -> list[Workload]:
    """The shipped set `shipped` (`path` None) or the user's JSONL file; bad lines say which
    and why. `chat.jsonl` holds the questions `localspec bench chat` asks."""
    if path is None:
        text = resources.files("localspec").joinpath(f"workloads/{shipped}").read_text()
    else:
        text = read_text_file(path, f"the workloads file {path}")
    rows: list[Workload] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(Workload(**json.loads(line)))
            except (TypeError, ValueError, RecursionError) as exc:
                raise UsageError(f"workloads line {number}: {exc}") from exc
    if not rows:
        raise UsageError("the workloads file has no prompts")
    ids = [w.id for w in rows]
    if len(set(ids)) != len(ids):
        raise UsageError("workload ids must be unique: results are keyed by them")
    return rows


def select(
    workloads: list[Workload], categories: list[str] | None, *, one_per_category: bool
) -> list[Workload]:
    """The workloads to run: only `categories` (if given), optionally the first of each."""
    if categories:
        unknown = set(categories) - {w.category for w in workloads}
        if unknown:
            known = ", ".join(sorted({w.category for w in workloads}))
            raise UsageError(f"no workloads in category {sorted(unknown)}: known are {known}")
        workloads = [w for w in workloads if w.category in categories]
    if one_per_category:
        first: dict[str, Workload] = {}
        for workload in workloads:
            first.setdefault(workload.category, workload)
        workloads = list(first.values())
    return workloads
