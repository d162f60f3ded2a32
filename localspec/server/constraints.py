"""The constraint a request asks for, read from the fields both APIs use for it.

- OpenAI's `response_format`: `{"type": "text"}` (none), `{"type": "json_object"}` (any
  object; llama-server also reads a `schema` there), `{"type": "json_schema", "json_schema":
  {"name", "schema", "strict"}}` (the schema is always enforced, `strict` or not).
  Output follows `json.dumps`'s spacing (`spaced_schema`) unless the schema sets its own.
- llama.cpp's `json_schema` (a schema object) and `grammar` (GBNF text), read on every
  endpoint as llama-server does.

One request names at most one of them. The constraint is compiled before the generation is
queued (`checked`), so a bad schema or grammar is a 400 naming its field with the constraint
library's reason, and nothing is generated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from localspec.constraints import Constraint, ConstraintError
from localspec.server.jobs import ServerState
from localspec.server.wire import ApiError, Fields
from localspec.tools.grammar import spaced_schema


@dataclass(frozen=True)
class Requested:
    """A request's constraint and the field it came from (the 400's `param`)."""

    constraint: Constraint
    param: str


def requested_constraint(fields: Fields) -> Requested | None:
    """The constraint the request's fields ask for, None when none does."""
    return _one_of([read(fields) for read in (_response_format, _json_schema, _grammar)])


def _one_of(asked: list[Requested | None]) -> Requested | None:
    """The one constraint asked for, None for none; more than one is a 400 naming them."""
    found = [requested for requested in asked if requested is not None]
    if len(found) > 1:
        names = " and ".join(f"'{item.param}'" for item in found)
        raise ApiError(400, f"{names} both constrain the output: send one", param=found[1].param)
    return found[0] if found else None


async def checked(state: ServerState, requested: Requested | None) -> Constraint | None:
    """The constraint, compiled once for this model before anything is queued (off the event
    loop: a large schema takes a while, and other requests keep streaming meanwhile)."""
    if requested is None:
        return None
    try:
        await run_in_threadpool(state.runtime.check_constraint, requested.constraint)
    except ConstraintError as exc:
        raise ApiError(400, str(exc), param=requested.param, code="invalid_constraint") from exc
    return requested.constraint


def _response_format(fields: Fields) -> Requested | None:
    value = fields.body.get("response_format")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fields.error("response_format", 'must be an object such as {"type": "json_object"}')
    response = Fields(value, prefix="response_format.")
    kind = response.string("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return _schema(response, "schema", _ANY_OBJECT)
    if kind == "json_schema":
        inner = value.get("json_schema")
        if not isinstance(inner, dict):
            raise response.error("json_schema", 'must be an object: {"name", "schema"}')
        described = Fields(inner, prefix="response_format.json_schema.")
        return _schema(described, "schema", _ANY_OBJECT)
    raise response.error("type", "must be text, json_object or json_schema")


def api_constraint(fields: Fields, holder: str) -> Requested | None:
    """The constraint of an API whose own format sits in field `holder` (`nested_format`),
    or of llama-server's fields, which every endpoint reads (`requested_constraint`); a
    request with both gets a 400 naming them."""
    return _one_of([nested_format(fields, holder), requested_constraint(fields)])


def nested_format(fields: Fields, holder: str) -> Requested | None:
    """`output_format` of the object in field `holder` (the Responses API's `text`,
    Anthropic's `output_config`), which holds it as `format`."""
    value = fields.body.get(holder)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fields.error(holder, 'must be an object such as {"format": {"type": "text"}}')
    return output_format(Fields(value, prefix=f"{fields.prefix}{holder}."), "format")


def output_format(fields: Fields, name: str) -> Requested | None:
    """A format object with the schema beside its type (`{"type": "json_schema", "schema":
    ...}`, `json_object` or `text`), as the Responses API's `text.format` and Anthropic's
    `output_config.format` write it; errors name the field as the client sent it."""
    value = fields.body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fields.error(name, 'must be an object such as {"type": "json_schema", "schema": {}}')
    described = Fields(value, prefix=f"{fields.prefix}{name}.")
    kind = described.string("type", "text")
    if kind == "text":
        return None
    if kind in ("json_object", "json_schema"):
        return _schema(described, "schema", _ANY_OBJECT)
    raise described.error("type", "must be text, json_object or json_schema")


def _json_schema(fields: Fields) -> Requested | None:
    return _schema(fields, "json_schema", None)


def _grammar(fields: Fields) -> Requested | None:
    grammar = fields.string("grammar")  # llama-server takes an empty grammar as none
    return Requested(Constraint.gbnf(grammar), "grammar") if grammar else None


def _schema(fields: Fields, name: str, absent: Constraint | None) -> Requested | None:
    """The JSON schema in field `name` (an object, true/false, or its JSON text), written
    with `spaced_schema`'s spacing; without one, `absent`."""
    value = fields.body.get(name)
    param = fields.prefix + name
    if value is None:
        return None if absent is None else Requested(absent, param)
    if not isinstance(value, dict | bool | str):
        raise fields.error(name, "must be a JSON schema (an object)")
    text = value if isinstance(value, str) else json.dumps(value)
    return Requested(Constraint.json_schema(spaced_schema(text)), param)


_ANY_OBJECT = Constraint.json_schema(spaced_schema('{"type": "object"}'))
