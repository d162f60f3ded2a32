"""The generation request's fields, each declared once: the server reads them, `/props`
reports them and the client writes them from these tables alone.

A `WireField` says how one setting travels: its name on the wire, the attribute it sets (on
`SamplingSettings`, `SpecSettings` or the request), its JSON type and bounds, and the
conversions between the two forms (llama.cpp's seed -1 is None here; the `samplers` chain
arrives as names or letters). Defaults are not declared: a field left out keeps the
settings dataclass's value (the server's `RequestDefaults`), so each default has one home.
llama.cpp keeps two lists that must agree (`params_from_json_cmpl` reads, `to_json`
writes); here adding a field is one entry, plus its dataclass attribute.

Every generation endpoint (OpenAI's, llama.cpp's, Anthropic's, the Responses API) reads the
whole table, so a field has no list of endpoints; what differs is which *servers* take it:
the `spec` object only localspec's, and `generic` names the extensions vLLM and SGLang take.

A small declarative table rather than pydantic: the server's messages and 400s stay exactly
as they were (pydantic's would need rewriting field by field), the client and the command
line import it without pydantic or numpy, and a request pays nothing for model building.
This module imports neither the server nor the client: both import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from localspec.errors import UsageError
from localspec.speculative.sampling_chain import DEFAULT_CHAIN, parse_chain
from localspec.speculative.settings import SpecMode

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

INT32_MAX = 2**31 - 1
"""The largest integer a count field takes (llama.cpp's fields are 32-bit)."""
SEED_MAX = 2**63 - 1  # OpenAI's seed is a 64-bit integer


class Kind(Enum):
    """A field's JSON type, as the server checks it before any conversion."""

    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    STRING = "string"
    STRINGS = "strings"  # a string or a list of strings (OpenAI's `stop`)
    ANY = "any"  # any JSON value: the field's `decode` checks it


class WireValueError(ValueError):
    """A value of the right JSON type that means nothing: the message is what follows the
    field's name in the 400 ("'samplers' is refused: ...")."""


@dataclass(frozen=True)
class Generic:
    """An extension vLLM and SGLang take, by `name`: sent to such a server only when it
    changes something (differs from `neutral`), so one that knows none of them still works."""

    name: str
    neutral: Any


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class WireField:
    """One request field. `attr`: the attribute it sets where its name differs from `wire`;
    `minimum`/`maximum`: an integer's bounds; `decode`/`encode`: wire value to attribute value
    and back; `optional`: the client sends it only when it differs from the dataclass default
    (a server that lacks it never sees it); `option`: the command-line option's argparse
    destination where it differs from the attribute (fields without an option are absent
    from the command line's namespace, so the client writes only what the options set)."""

    wire: str
    kind: Kind
    attr: str = ""
    minimum: int = 0
    maximum: int = INT32_MAX
    decode: Callable[[Any], Any] = _same
    encode: Callable[[Any], Any] = _same
    optional: bool = False
    generic: Generic | None = None
    option: str = ""

    @property
    def attribute(self) -> str:
        return self.attr or self.wire

    @property
    def destination(self) -> str:
        return self.option or self.attribute


@dataclass(frozen=True)
class WireGroup:
    """Fields that set one settings object. `nested`: the object they travel in (empty: the
    body itself), which also names the settings' own refusals; `shorthand`: the field a bare
    string stands for (`"spec": "ngram"` is `{"mode": "ngram"}`)."""

    fields: tuple[WireField, ...]
    nested: str = ""
    shorthand: str = ""


def _seed(value: int) -> int | None:
    """llama.cpp's -1 (any negative here, after the bounds): a fresh seed per request."""
    return None if value < 0 else value


def _last_n(value: int) -> int:
    """llama.cpp's -1: the whole context (no context holds INT32_MAX tokens)."""
    return INT32_MAX if value == -1 else value


def _chain(value: Any) -> tuple[str, ...]:
    """llama-server's `samplers`: stage names in order, or a string of letters; `[]` is the
    draw alone, at temperature 1 (`localspec.speculative.sampling_chain`)."""
    names = isinstance(value, list) and all(isinstance(name, str) for name in value)
    if not (isinstance(value, str) or names):  # a string's letters are checked as it is read
        raise WireValueError("must be a list of sampler names or a string of letters")
    try:
        return parse_chain(value)
    except UsageError as exc:
        raise WireValueError(f"is refused: {exc}") from exc


def _mode(value: str) -> SpecMode:
    try:
        return SpecMode(value)
    except ValueError:
        raise WireValueError(f"must be one of {', '.join(m.value for m in SpecMode)}") from None


SAMPLING = WireGroup(
    (
        WireField("temperature", Kind.NUMBER),
        WireField("top_k", Kind.INTEGER, generic=Generic("top_k", 0)),
        WireField("top_p", Kind.NUMBER),
        WireField("min_p", Kind.NUMBER, generic=Generic("min_p", 0.0)),
        WireField("repeat_penalty", Kind.NUMBER, generic=Generic("repetition_penalty", 1.0)),
        WireField("repeat_last_n", Kind.INTEGER, minimum=-1, decode=_last_n, optional=True),
        WireField("presence_penalty", Kind.NUMBER, optional=True),
        WireField("frequency_penalty", Kind.NUMBER, optional=True),
        WireField(
            "seed",
            Kind.INTEGER,
            minimum=-1,
            maximum=SEED_MAX,
            decode=_seed,
            encode=lambda seed: -1 if seed is None else seed,
            optional=True,
        ),
        WireField(
            "samplers",
            Kind.ANY,
            decode=_chain,
            encode=lambda chain: list(DEFAULT_CHAIN if chain is None else chain),
            optional=True,
        ),
    )
)
"""`SamplingSettings`: the same names in OpenAI's and llama.cpp's APIs."""

SPECULATION = WireGroup(
    (
        WireField("mode", Kind.STRING, decode=_mode, encode=str, option="spec"),
        WireField("draft_max", Kind.INTEGER),
        WireField("p_min", Kind.NUMBER),
        WireField("ngram_max", Kind.INTEGER, attr="ngram_draft_max", option="ngram_max"),
        WireField("ngram_min_match", Kind.INTEGER, minimum=1),
        WireField("redecode_ties", Kind.BOOLEAN),
        WireField("suffix_drafts", Kind.BOOLEAN),
        WireField("learn", Kind.BOOLEAN),
        WireField("max_draft_tokens", Kind.INTEGER, optional=True),
        WireField("max_draft_ms", Kind.NUMBER, optional=True),
    ),
    nested="spec",
    shorthand="mode",
)
"""`SpecSettings`: localspec's own `spec` object, which only a localspec server takes."""

REQUEST = WireGroup(
    (
        WireField("stop", Kind.STRINGS, encode=list, generic=Generic("stop", [])),
        WireField("ignore_eos", Kind.BOOLEAN, generic=Generic("ignore_eos", False)),
    )
)
"""The request's own stop strings and llama.cpp's `ignore_eos` (benchmarks use it)."""


GENERIC = {f.wire: f.generic for group in (SAMPLING, REQUEST) for f in group.fields if f.generic}
"""The extensions vLLM and SGLang take, by their name on localspec's wire."""


def reported(group: WireGroup, settings: object) -> dict[str, Any]:
    """Every field of `group` as `settings` holds it (`/props` reports the defaults so)."""
    return {f.wire: f.encode(getattr(settings, f.attribute)) for f in group.fields}


def requested(group: WireGroup, settings: DataclassInstance) -> dict[str, Any]:
    """The fields a client sends for `settings`: all but the optional ones at their
    dataclass default (read from the instance, so the client never imports the engine)."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    sent: dict[str, Any] = {}
    for f in group.fields:
        value = getattr(settings, f.attribute)
        if not f.optional or value != defaults[f.attribute]:
            sent[f.wire] = f.encode(value)
    return sent


def from_options(group: WireGroup, options: object) -> dict[str, Any]:
    """The fields the command line's options set (`argparse` destinations): an option left
    unset (None) is left out, so the server's own setting applies."""
    sent: dict[str, Any] = {}
    for f in group.fields:
        value = getattr(options, f.destination, None)
        if value is not None:
            sent[f.wire] = f.encode(value)
    return sent
