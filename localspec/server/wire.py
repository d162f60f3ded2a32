"""Reading request fields and writing errors, shared by the OpenAI and llama.cpp endpoints.

Every malformed field becomes a 400 that names the field, in OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`), which llama.cpp-style clients also read.
Fields a client sends that localspec does not know are ignored, as both servers do; fields it
knows but cannot honour (n > 1, logprobs, tools) are refused rather than silently dropped.
Fields a request leaves out take the server's defaults (`RequestDefaults`, from `localspec
serve`'s options). The body itself is checked before any field is read (`body`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localspec.errors import LocalspecError, PromptTooLongError, UsageError
from localspec.remote import spec_fields
from localspec.server.worker import QueueFullError
from localspec.speculative.engine import SpecMode, SpecSettings
from localspec.speculative.sampling import SamplingSettings
from localspec.speculative.sampling_chain import parse_chain

RETRY_AFTER_S = 2
INT32_MAX = 2**31 - 1
"""The largest integer a count field takes (llama.cpp's fields are 32-bit)."""
SEED_MAX = 2**63 - 1  # OpenAI's seed is a 64-bit integer


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

    def optional_number(self, name: str, default: float | None) -> float | None:
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
    until the context is full) plus localspec's speculation settings."""
    sampling = defaults.sampling
    spec = defaults.spec
    return {
        "n_ctx": n_ctx,
        "params": {
            "n_predict": defaults.max_tokens or -1,
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repeat_penalty,
            "repeat_last_n": sampling.repeat_last_n,
            "presence_penalty": sampling.presence_penalty,
            "frequency_penalty": sampling.frequency_penalty,
            "seed": -1 if sampling.seed is None else sampling.seed,
            "stop": list(defaults.stop),
            "ignore_eos": defaults.ignore_eos,
            "spec": spec_fields(spec),
        },
    }


def sampling_from(fields: Fields, default: SamplingSettings) -> SamplingSettings:
    """The OpenAI and llama.cpp sampling fields (same names in both, `repeat_penalty` too).

    `seed` -1 (llama.cpp's "random") or absent with no server seed: a fresh seed;
    `repeat_last_n` -1 penalises repeats over the whole context, as in llama.cpp."""
    server_seed = -1 if default.seed is None else default.seed
    seed = fields.integer("seed", server_seed, minimum=-1, maximum=SEED_MAX)
    last_n = fields.integer("repeat_last_n", default.repeat_last_n, minimum=-1)
    try:
        return SamplingSettings(
            temperature=fields.number("temperature", default.temperature),
            top_k=fields.integer("top_k", default.top_k),
            top_p=fields.number("top_p", default.top_p),
            min_p=fields.number("min_p", default.min_p),
            repeat_penalty=fields.number("repeat_penalty", default.repeat_penalty),
            # llama.cpp's -1: the whole context (no context holds INT32_MAX tokens)
            repeat_last_n=INT32_MAX if last_n == -1 else last_n,
            presence_penalty=fields.number("presence_penalty", default.presence_penalty),
            frequency_penalty=fields.number("frequency_penalty", default.frequency_penalty),
            seed=None if seed < 0 else seed,
            samplers=samplers_from(fields, default.samplers),
        )
    except UsageError as exc:
        raise ApiError(400, str(exc)) from exc


def samplers_from(fields: Fields, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """llama-server's `samplers`: the chain's stages in order, a list of names or a string of
    letters (`localspec.speculative.sampling_chain`); `[]` is the draw alone, at temperature 1."""
    value = fields.body.get("samplers")
    if value is None:
        return default
    if not isinstance(value, str | list) or not all(isinstance(name, str) for name in value):
        raise fields.error("samplers", "must be a list of sampler names or a string of letters")
    try:
        return parse_chain(value)
    except UsageError as exc:
        raise fields.error("samplers", f"is refused: {exc}") from exc


def spec_from(fields: Fields, default: SpecSettings) -> SpecSettings:
    """localspec's per-request speculation override: `"spec": "ngram"` or
    `"spec": {"mode": "draft", "draft_max": 6}`; absent means the server's setting."""
    raw = fields.body.get("spec")
    if raw is None:
        return default
    if isinstance(raw, str):
        raw = {"mode": raw}
    if not isinstance(raw, dict):
        raise fields.error("spec", "must be a mode name or an object")
    spec = Fields(raw, prefix="spec.")
    mode_name = spec.string("mode", default.mode.value)
    try:
        mode = SpecMode(mode_name)
    except ValueError as exc:
        modes = ", ".join(m.value for m in SpecMode)
        raise spec.error("mode", f"must be one of {modes}") from exc
    try:
        return SpecSettings(
            mode=mode,
            draft_max=spec.integer("draft_max", default.draft_max),
            p_min=spec.optional_number("p_min", default.p_min),
            ngram_draft_max=spec.integer("ngram_max", default.ngram_draft_max),
            ngram_min_match=spec.integer("ngram_min_match", default.ngram_min_match, minimum=1),
            redecode_ties=spec.boolean("redecode_ties", default.redecode_ties),
        )
    except UsageError as exc:
        raise ApiError(400, str(exc), param="spec") from exc
