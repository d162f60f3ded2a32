"""Reading request fields and writing errors, shared by the OpenAI and llama.cpp endpoints.

Every malformed field becomes a 400 that names the field, in OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`), which llama.cpp-style clients also read.
Fields a client sends that localspec does not know are ignored, as both servers do; fields it
knows but cannot honour (n > 1, logprobs, tools) are refused rather than silently dropped.
Fields a request leaves out take the server's defaults (`RequestDefaults`, from `localspec
serve`'s options). The body itself is checked before any field is read (`body`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from localspec.errors import LocalspecError, PromptTooLongError, UsageError
from localspec.server.worker import QueueFullError
from localspec.speculative.engine import SpecSettings
from localspec.speculative.sampling import SamplingSettings
from localspec.wire_schema import (
    INT32_MAX,
    REQUEST,
    SAMPLING,
    SPECULATION,
    Kind,
    WireField,
    WireGroup,
    WireValueError,
    reported,
)

RETRY_AFTER_S = 2


class ApiError(Exception):
    """An error response: status, message and OpenAI's error type/param/code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def api_error(exc: LocalspecError) -> ApiError:
    """The HTTP form of an expected failure."""
    if isinstance(exc, PromptTooLongError):
        return context_exceeded(exc.prompt_tokens, exc.n_ctx)
    if isinstance(exc, QueueFullError):
        return ApiError(
            503,
            str(exc),
            kind="server_busy",
            code="queue_full",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if isinstance(exc, UsageError):
        return ApiError(400, str(exc))
    return ApiError(500, str(exc), kind="server_error")


def context_exceeded(prompt_tokens: int, n_ctx: int) -> ApiError:
    """The 400 for a prompt the window cannot hold with a token to generate."""
    return ApiError(
        400,
        f"the prompt is {prompt_tokens} tokens but the context window holds {n_ctx} (and at "
        f"least one token must be left to generate); localspec never truncates prompts: "
        f"shorten it or restart the server with a larger --ctx-size",
        param="prompt",
        code="context_length_exceeded",
    )


def token_ids(value: Any) -> list[int] | None:
    """`value` as a prompt of token ids (both APIs accept one), or None if it is not one."""
    if isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        return list(value)
    return None


class Fields:
    """Typed reads of a JSON object's fields; a wrong type is a 400 naming the field.

    `prefix` names a nested object's fields as a client would (`spec.draft_max`)."""

    def __init__(self, body: Mapping[str, Any], prefix: str = "") -> None:
        self.body = body
        self.prefix = prefix

    def present(self, name: str) -> bool:
        return self.body.get(name) is not None

    def error(self, name: str, problem: str) -> ApiError:
        """A 400 for field `name`: "'spec.draft_max' must be ..." (`problem` follows the name)."""
        full = self.prefix + name
        return ApiError(400, f"'{full}' {problem}", param=full)

    def _get(self, name: str, kinds: tuple[type, ...], what: str) -> Any:
        value = self.body.get(name)
        if value is None:
            return None
        if isinstance(value, bool) and bool not in kinds:  # in Python, True is an int
            raise self.error(name, f"must be {what}, not a boolean")
        if not isinstance(value, kinds):
            raise self.error(name, f"must be {what}")
        return value

    def string(self, name: str, default: str = "") -> str:
        value = self._get(name, (str,), "a string")
        return default if value is None else str(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._get(name, (bool,), "true or false")
        return default if value is None else bool(value)

    def integer(
        self, name: str, default: int, *, minimum: int = 0, maximum: int = INT32_MAX
    ) -> int:
        """An integer in [minimum, maximum]: a count beyond any context (`max_tokens`: 1e22)
        is a mistake to report, not a request to run until the context is full."""
        value = self._get(name, (int, float), "an integer")
        if value is None:
            return default
        if isinstance(value, float) and not value.is_integer():
            raise self.error(name, "must be an integer")
        if not minimum <= value <= maximum:
            raise self.error(name, f"must be between {minimum} and {maximum}")
        return int(value)

    def number(self, name: str, default: float) -> float:
        value = self._get(name, (int, float), "a number")
        return default if value is None else self._finite(name, value)

    def _finite(self, name: str, value: float) -> float:
        """JSON integers may have thousands of digits; beyond ~1e308 float() overflows."""
        try:
            return float(value)
        except OverflowError:
            raise self.error(name, "must be a finite number") from None

    def strings(self, name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A string or a list of strings (OpenAI's `stop`); absent (or null): `default`."""
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, str):
            return (value,) if value else ()
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(item for item in value if item)
        raise self.error(name, "must be a string or a list of strings")

    def mapping(self, name: str) -> Fields:
        """An object's fields (absent or null: none), its errors named `name.field`."""
        value = self._get(name, (dict,), "an object")
        return Fields(value or {}, prefix=f"{self.prefix}{name}.")

    def objects(self, name: str) -> list[Mapping[str, Any]]:
        value = self.body.get(name)
        if value is None:
            return []
        if isinstance(value, list) and all(isinstance(item, dict) for item in value):
            return value
        raise self.error(name, "must be a list of objects")

    def refuse(self, name: str, allowed: object, why: str) -> None:
        """A known field localspec cannot honour: refuse values other than `allowed`."""
        value = self.body.get(name)
        if value is not None and value != allowed:
            raise self.error(name, f"is not supported: {why}")


def refuse_unhonoured(fields: Fields) -> None:
    """Sampling and reporting fields of OpenAI's and llama-server's that localspec does not
    implement: any value that would change something is refused, on every endpoint, rather
    than dropped (a client that sends their neutral values is served)."""
    if fields.body.get("logit_bias") not in (None, {}, []):
        raise fields.error("logit_bias", "is not supported: no logit bias is applied")
    fields.refuse("typical_p", 1.0, "the typical sampler is not implemented")
    fields.refuse("xtc_probability", 0.0, "the XTC sampler is not implemented")
    fields.refuse("mirostat", 0, "Mirostat is not implemented")
    fields.refuse("dry_multiplier", 0.0, "the DRY sampler is not implemented")
    fields.refuse("n_probs", 0, "token probabilities are not reported")
    fields.refuse("post_sampling_probs", False, "token probabilities are not reported")


@dataclass(frozen=True)
class RequestDefaults:
    """What a request gets for a field it leaves out: `localspec serve`'s generation options
    (llama-server does the same with its command line); a request's own fields win.

    `max_tokens` None leaves each API its own default: until the context is full, except
    OpenAI's 16 on `/v1/completions`."""

    max_tokens: int | None = None
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    spec: SpecSettings = field(default_factory=SpecSettings)  # auto, as on every surface


def generation_settings(defaults: RequestDefaults, n_ctx: int) -> dict[str, Any]:
    """`/props`'s `default_generation_settings`, in llama-server's names (`n_predict` -1:
    until the context is full) plus localspec's speculation settings: every field of the
    wire schema, as a request that leaves it out gets it."""
    return {
        "n_ctx": n_ctx,
        "params": {
            "n_predict": defaults.max_tokens or -1,
            **reported(SAMPLING, defaults.sampling),
            **reported(REQUEST, defaults),
            "spec": reported(SPECULATION, defaults.spec),
        },
    }


def sampling_from(fields: Fields, default: SamplingSettings) -> SamplingSettings:
    """The sampling fields (`wire_schema.SAMPLING`); those left out keep `default`'s."""
    return _settings_from(fields, SAMPLING, default)


def spec_from(fields: Fields, default: SpecSettings) -> SpecSettings:
    """localspec's per-request speculation override: `"spec": "ngram"` or
    `"spec": {"mode": "draft", "draft_max": 6}`; absent means the server's setting."""
    name, shorthand = SPECULATION.nested, SPECULATION.shorthand
    raw = fields.body.get(name)
    if raw is None:
        return default
    if isinstance(raw, str):
        raw = {shorthand: raw}
    if not isinstance(raw, dict):
        raise fields.error(name, f"must be a {shorthand} name or an object")
    return _settings_from(Fields(raw, prefix=f"{name}."), SPECULATION, default)


def request_from(fields: Fields, default: RequestDefaults) -> dict[str, Any]:
    """The request's own fields (`wire_schema.REQUEST`: stop strings, `ignore_eos`) by
    attribute; those left out take the server's defaults."""
    return {
        f.attribute: read_field(fields, f)
        if fields.present(f.wire)
        else getattr(default, f.attribute)
        for f in REQUEST.fields
    }


Settings = TypeVar("Settings", SamplingSettings, SpecSettings)


def _settings_from(fields: Fields, group: WireGroup, default: Settings) -> Settings:
    """`default` with the fields of `group` the request gives; a combination the settings
    refuse is a 400 too (named by the group's object, if it has one)."""
    given = {f.attribute: read_field(fields, f) for f in group.fields if fields.present(f.wire)}
    try:
        return dataclasses.replace(default, **given)
    except UsageError as exc:
        raise ApiError(400, str(exc), param=group.nested or None) from exc


def read_field(fields: Fields, declared: WireField) -> Any:
    """A present field's value as its attribute takes it: checked for its JSON type and
    bounds, then converted (`WireField.decode`)."""
    name = declared.wire
    raw: Any
    if declared.kind is Kind.INTEGER:
        raw = fields.integer(name, 0, minimum=declared.minimum, maximum=declared.maximum)
    elif declared.kind is Kind.NUMBER:
        raw = fields.number(name, 0.0)
    elif declared.kind is Kind.BOOLEAN:
        raw = fields.boolean(name)
    elif declared.kind is Kind.STRING:
        raw = fields.string(name)
    elif declared.kind is Kind.STRINGS:
        raw = fields.strings(name)
    else:
        raw = fields.body[name]
    try:
        return declared.decode(raw)
    except WireValueError as exc:
        raise fields.error(name, str(exc)) from exc
