"""What a generation's output must match: a JSON schema, any JSON object, a regex or a grammar.

A `Constraint` is plain data (kind and source text), cheap to import and to build, so the
surfaces that read it from the wire (`response_format`, `json_schema`, `grammar`, tools) need
neither numpy nor the constraint library. `localspec.constraints.compile` turns it into the
library's grammar; errors in it surface there, before any generation starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from localspec.errors import ConstraintError

ConstraintKind = Literal["json_schema", "json_object", "regex", "gbnf", "lark"]
KINDS: tuple[ConstraintKind, ...] = ("json_schema", "json_object", "regex", "gbnf", "lark")


@dataclass(frozen=True)
class Constraint:
    """`kind` says how to read `source`: a JSON schema's text, a regex (matched in full),
    llama.cpp GBNF or llguidance's Lark dialect. `json_object` (any JSON object) needs none."""

    kind: ConstraintKind
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(
                str(self.kind), f"unknown constraint kind; use one of {', '.join(KINDS)}"
            )

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any] | str) -> Constraint:
        """A schema as a mapping or as JSON text (kept as given, so errors point into it)."""
        if isinstance(schema, str):
            return cls("json_schema", schema)
        try:
            return cls("json_schema", json.dumps(schema))
        except (TypeError, ValueError) as exc:
            raise ConstraintError("json_schema", f"the schema is not JSON data: {exc}") from exc

    @classmethod
    def json_object(cls) -> Constraint:
        return cls("json_object")

    @classmethod
    def regex(cls, pattern: str) -> Constraint:
        return cls("regex", pattern)

    @classmethod
    def gbnf(cls, grammar: str) -> Constraint:
        return cls("gbnf", grammar)

    @classmethod
    def lark(cls, grammar: str) -> Constraint:
        return cls("lark", grammar)
