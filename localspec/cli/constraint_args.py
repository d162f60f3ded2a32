"""`complete --json-schema FILE|JSON` and `--grammar FILE`: the output's constraint.

Read and checked as JSON before anything loads or connects; the constraint library's own
checks run where the model is (here or in the server), and their message, which points into
the schema or grammar over several lines, is printed on one line as every CLI error is.
A server gets the constraint in its API's field: `response_format` (a JSON schema) or
`grammar` on the chat endpoint, `json_schema` or `grammar` on `/completion` and `/infill`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from localspec.constraints import Constraint
from localspec.context_files import read_bytes_at_most
from localspec.errors import UsageError
from localspec.tools.grammar import spaced_schema


def read_constraint(args: argparse.Namespace) -> Constraint | None:
    """The constraint `args` ask for; a file that cannot be read, or a schema that is not a
    JSON object, is a usage error."""
    schema, grammar = args.json_schema, args.grammar
    if schema is not None and grammar is not None:
        raise UsageError("give one constraint: --json-schema or --grammar")
    if grammar is not None:
        return Constraint.gbnf(_read(grammar, "--grammar"))
    if schema is None:
        return None
    text = schema if schema.lstrip().startswith("{") else _read(schema, "--json-schema")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--json-schema is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise UsageError("--json-schema must be a JSON object (a schema)")
    return Constraint.json_schema(text)


def constraint_fields(constraint: Constraint | None, *, chat: bool) -> dict[str, Any]:
    """The request fields that carry `constraint` to a server's endpoint."""
    if constraint is None:
        return {}
    if constraint.kind == "gbnf":
        return {"grammar": constraint.source}
    schema = json.loads(constraint.source)
    if not chat:
        return {"json_schema": schema}
    described = {"name": "output", "schema": schema, "strict": True}
    return {"response_format": {"type": "json_schema", "json_schema": described}}


def spaced(constraint: Constraint | None) -> Constraint | None:
    """The constraint as localspec's server applies it: a schema with `json.dumps`'s spacing
    (`spaced_schema`), so both paths generate alike. Other servers get the schema as given."""
    if constraint is None or constraint.kind != "json_schema":
        return constraint
    return Constraint.json_schema(spaced_schema(constraint.source))


def one_line(message: str) -> str:
    """A multi-line message (a caret under the failing place) as one line."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def _read(name: str, option: str) -> str:
    try:
        raw = read_bytes_at_most(Path(name), f"{option} {name}")
    except OSError as exc:
        raise UsageError(f"cannot read {option} {name}: {exc.strerror}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {name} is not UTF-8 text (at byte {exc.start})") from exc
