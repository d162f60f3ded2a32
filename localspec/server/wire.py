"""Reading request bodies and writing errors, shared by the OpenAI and llama.cpp endpoints.

Every malformed field becomes a 400 that names the field, in OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`), which llama.cpp-style clients also read.
Fields a client sends that localspec does not know are ignored, as both servers do; fields it
knows but cannot honour (n > 1, logprobs, tools) are refused rather than silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from localspec.errors import LocalspecError, PromptTooLongError, UsageError
from localspec.server.worker import QueueFullError
from localspec.speculative.engine import SpecMode, SpecSettings
from localspec.speculative.sampling import SamplingSettings

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
        return ApiError(400, str(exc), code="context_length_exceeded", param="prompt")
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


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def token_ids(value: Any) -> list[int] | None:
    """`value` as a prompt of token ids (both APIs accept one), or None if it is not one."""
    if isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        return list(value)
    return None


class Fields:
    """Typed reads of a JSON object's fields; a wrong type is a 400 naming the field."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def present(self, name: str) -> bool:
        return self.body.get(name) is not None

    def _get(self, name: str, kinds: tuple[type, ...], what: str) -> Any:
        value = self.body.get(name)
        if value is None:
            return None
        if isinstance(value, bool) and bool not in kinds:  # in Python, True is an int
            raise ApiError(400, f"'{name}' must be {what}, not a boolean", param=name)
        if not isinstance(value, kinds):
            raise ApiError(400, f"'{name}' must be {what}", param=name)
        return value

    def string(self, name: str, default: str = "") -> str:
        value = self._get(name, (str,), "a string")
        return default if value is None else str(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._get(name, (bool,), "true or false")
        return default if value is None else bool(value)

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        value = self._get(name, (int, float), "an integer")
        if value is None:
            return default
        if isinstance(value, float) and not value.is_integer():
            raise ApiError(400, f"'{name}' must be an integer", param=name)
        number = int(value)
        if minimum is not None and number < minimum:
            raise ApiError(400, f"'{name}' must be at least {minimum}", param=name)
        return number

    def number(self, name: str, default: float) -> float:
        value = self._get(name, (int, float), "a number")
        return default if value is None else float(value)

    def optional_number(self, name: str, default: float | None) -> float | None:
        value = self._get(name, (int, float), "a number")
        return default if value is None else float(value)

    def strings(self, name: str) -> tuple[str, ...]:
        """A string or a list of strings (OpenAI's `stop`)."""
        value = self.body.get(name)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,) if value else ()
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(item for item in value if item)
        raise ApiError(400, f"'{name}' must be a string or a list of strings", param=name)

    def objects(self, name: str) -> list[Mapping[str, Any]]:
        value = self.body.get(name)
        if value is None:
            return []
        if isinstance(value, list) and all(isinstance(item, dict) for item in value):
            return value
        raise ApiError(400, f"'{name}' must be a list of objects", param=name)

    def refuse(self, name: str, allowed: object, why: str) -> None:
        """A known field localspec cannot honour: refuse values other than `allowed`."""
        value = self.body.get(name)
        if value is not None and value != allowed:
            raise ApiError(400, f"'{name}' is not supported: {why}", param=name)


def sampling_from(fields: Fields) -> SamplingSettings:
    """The OpenAI and llama.cpp sampling fields (same names in both, `repeat_penalty` too)."""
    seed = fields.integer("seed", -1)
    try:
        return SamplingSettings(
            temperature=fields.number("temperature", 0.0),
            top_k=fields.integer("top_k", 0, minimum=0),
            top_p=fields.number("top_p", 1.0),
            min_p=fields.number("min_p", 0.0),
            repeat_penalty=fields.number("repeat_penalty", 1.0),
            presence_penalty=fields.number("presence_penalty", 0.0),
            frequency_penalty=fields.number("frequency_penalty", 0.0),
            seed=None if seed < 0 else seed,
        )
    except UsageError as exc:
        raise ApiError(400, str(exc)) from exc


def spec_from(fields: Fields, default: SpecSettings) -> SpecSettings:
    """localspec's per-request speculation override: `"spec": "ngram"` or
    `"spec": {"mode": "draft", "draft_max": 6}`; absent means the server's setting."""
    raw = fields.body.get("spec")
    if raw is None:
        return default
    if isinstance(raw, str):
        raw = {"mode": raw}
    if not isinstance(raw, dict):
        raise ApiError(400, "'spec' must be a mode name or an object", param="spec")
    spec = Fields(raw)
    mode_name = spec.string("mode", default.mode.value)
    try:
        mode = SpecMode(mode_name)
    except ValueError as exc:
        modes = ", ".join(m.value for m in SpecMode)
        raise ApiError(400, f"'spec.mode' must be one of {modes}", param="spec") from exc
    try:
        return SpecSettings(
            mode=mode,
            draft_max=spec.integer("draft_max", default.draft_max, minimum=0),
            p_min=spec.optional_number("p_min", default.p_min),
            ngram_draft_max=spec.integer("ngram_max", default.ngram_draft_max, minimum=0),
            ngram_min_match=spec.integer("ngram_min_match", default.ngram_min_match, minimum=1),
            redecode_ties=spec.boolean("redecode_ties", default.redecode_ties),
        )
    except UsageError as exc:
        raise ApiError(400, str(exc), param="spec") from exc
