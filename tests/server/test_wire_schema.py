"""The wire schema both ways, without a server: what the client writes the server reads back
as the same settings, the server's refusals keep their words, and the server never imports
the client."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from localspec.server.wire import (
    ApiError,
    Fields,
    RequestDefaults,
    generation_settings,
    sampling_from,
    spec_from,
)
from localspec.speculative.sampling import SamplingSettings
from localspec.speculative.settings import SpecMode, SpecSettings
from localspec.wire_schema import (
    SAMPLING,
    SPECULATION,
    Kind,
    WireField,
    WireGroup,
    reported,
    requested,
)

SERVER = Path(__file__).resolve().parents[2] / "localspec" / "server"

# values no generic rule can pick: a seed for None, a chain, another mode
_SPECIAL: dict[str, Any] = {
    "seed": 7,
    "samplers": ("top_k", "temperature"),
    "mode": SpecMode.NGRAM,
}


def _other(declared: WireField, value: Any) -> Any:
    """A valid value for the field other than its default `value`: a new field of a plain
    type (its default may be None: unset) needs no entry here."""
    if declared.attribute in _SPECIAL:
        return _SPECIAL[declared.attribute]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None and declared.kind is Kind.INTEGER:
        return 1
    return value / 2 if value else 0.5  # a float, or None (p_min)


def _changed(default: Any, group: WireGroup, only: str | None = None) -> Any:
    return dataclasses.replace(
        default,
        **{
            f.attribute: _other(f, getattr(default, f.attribute))
            for f in group.fields
            if only in (None, f.attribute)
        },
    )


def _parsed_sampling(body: dict[str, Any]) -> SamplingSettings:
    return sampling_from(Fields(body), SamplingSettings())


def _parsed_spec(body: dict[str, Any]) -> SpecSettings:
    return spec_from(Fields({SPECULATION.nested: body}), SpecSettings())


@pytest.mark.parametrize("name", [f.attribute for f in SAMPLING.fields])
def test_each_sampling_field_round_trips(name: str) -> None:
    settings = _changed(SamplingSettings(), SAMPLING, name)
    assert settings != SamplingSettings()
    assert _parsed_sampling(requested(SAMPLING, settings)) == settings


@pytest.mark.parametrize("name", [f.attribute for f in SPECULATION.fields])
def test_each_speculation_field_round_trips(name: str) -> None:
    settings = _changed(SpecSettings(), SPECULATION, name)
    assert settings != SpecSettings()
    assert _parsed_spec(requested(SPECULATION, settings)) == settings


def test_every_field_at_once_round_trips_and_props_reports_what_a_request_would_send() -> None:
    sampling = _changed(SamplingSettings(), SAMPLING)
    spec = _changed(SpecSettings(), SPECULATION)
    assert _parsed_sampling(requested(SAMPLING, sampling)) == sampling
    assert _parsed_spec(requested(SPECULATION, spec)) == spec
    params = generation_settings(RequestDefaults(sampling=sampling, spec=spec), 64)["params"]
    assert _parsed_sampling(params) == sampling
    assert _parsed_spec(params["spec"]) == spec
    assert params == {**params, **reported(SAMPLING, sampling)}


def test_the_client_leaves_out_optional_fields_at_their_default() -> None:
    sent = requested(SAMPLING, SamplingSettings())
    assert set(sent) == {"temperature", "top_k", "top_p", "min_p", "repeat_penalty"}
    sent_spec = set(requested(SPECULATION, SpecSettings()))
    assert sent_spec == {f.wire for f in SPECULATION.fields if not f.optional}
    assert "max_draft_tokens" not in sent_spec  # unset budgets are not sent


def test_llama_cpp_conventions() -> None:
    assert _parsed_sampling({"seed": -1}).seed is None
    assert _parsed_sampling({"repeat_last_n": -1}).repeat_last_n == 2**31 - 1
    assert _parsed_sampling({"samplers": "kt"}).samplers == ("top_k", "temperature")
    assert spec_from(Fields({"spec": "draft"}), SpecSettings()).mode is SpecMode.DRAFT
    assert _parsed_spec({"ngram_max": 9}).ngram_draft_max == 9
    server = SamplingSettings(seed=5, temperature=0.7)
    assert sampling_from(Fields({}), server) == server  # left out: the server's defaults
    assert generation_settings(RequestDefaults(), 8)["params"]["seed"] == -1


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"seed": -7}, "seed", f"'seed' must be between -1 and {2**63 - 1}"),
        ({"top_k": True}, "top_k", "'top_k' must be an integer, not a boolean"),
        ({"top_k": 1.5}, "top_k", "'top_k' must be an integer"),
        ({"temperature": "hot"}, "temperature", "'temperature' must be a number"),
        ({"top_p": 0}, None, "top_p must be in (0, 1]"),
        (
            {"samplers": 3},
            "samplers",
            "'samplers' must be a list of sampler names or a string of letters",
        ),
        ({"spec": 3}, "spec", "'spec' must be a mode name or an object"),
        ({"spec": "fast"}, "spec.mode", "'spec.mode' must be one of off, ngram, draft, hybrid"),
        ({"spec": {"mode": 1}}, "spec.mode", "'spec.mode' must be a string"),
        ({"spec": {"draft_max": -1}}, "spec.draft_max", "'spec.draft_max' must be between 0 and"),
        ({"spec": {"draft_max": 65}}, "spec", "draft lengths must be between 0 and 64 tokens"),
        ({"spec": {"ngram_min_match": 0}}, "spec.ngram_min_match", "must be between 1 and"),
        ({"spec": {"redecode_ties": 1}}, "spec.redecode_ties", "must be true or false"),
    ],
)
def test_refusals_keep_their_words(body: dict[str, Any], param: str | None, message: str) -> None:
    fields = Fields(body)
    with pytest.raises(ApiError) as refused:
        sampling_from(fields, SamplingSettings())
        spec_from(fields, SpecSettings())
    assert refused.value.status == 400
    assert refused.value.param == param
    assert message in refused.value.message


def test_an_unknown_sampler_is_refused_naming_it() -> None:
    with pytest.raises(ApiError, match="'samplers' is refused: unknown sampler 'nope'"):
        _parsed_sampling({"samplers": ["nope"]})


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (`if TYPE_CHECKING:` and functions too)."""
    names: set[str] = set()
    package = "localspec.server"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_server_never_imports_the_client() -> None:
    files = sorted(SERVER.rglob("*.py"))
    assert files
    offenders = {
        path.name: sorted(name for name in _imported(path) if name.startswith("localspec.remote"))
        for path in files
    }
    assert {name: found for name, found in offenders.items() if found} == {}
