"""What the chat app is started with, and the knobs each conversation keeps for itself.

`Launch` is resolved once by the CLI (model files, command-line defaults); `ChatSettings` is
per conversation, stored as JSON beside it, so switching conversations switches the system
prompt, speculation mode and sampling that the engine receives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from localspec import (
    LocalspecError,
    RemoteSettings,
    Runtime,
    RuntimeSettings,
    SamplingSettings,
    SpecMode,
    SpecSettings,
)
from localspec.edits.grammar import EDIT_ANSWER_TOKENS

# builds the runtime inside the app, so loading shows a progress indicator instead of a frozen
# terminal; the second argument receives one-line notices (calibration) for the user
RuntimeFactory = Callable[[RuntimeSettings, Callable[[str], None]], Runtime]


class SettingsError(LocalspecError):
    """A conversation setting the user typed is out of range or not a number."""


@dataclass(frozen=True)
class ChatSettings:
    """Per-conversation generation settings; validated against the engine's own rules."""

    system: str = ""
    spec_mode: SpecMode = SpecMode.AUTO
    draft_max: int = 4
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = EDIT_ANSWER_TOKENS  # a whole small file and its sentence fit

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise SettingsError("max tokens must be at least 1")
        # the engine's settings classes own the ranges; building them checks these values
        self.sampling(SamplingSettings())
        self.spec(SpecSettings())

    def sampling(self, base: SamplingSettings) -> SamplingSettings:
        """The launch's sampling settings with this conversation's temperature and top-p."""
        return replace(base, temperature=self.temperature, top_p=self.top_p)

    def spec(self, base: SpecSettings) -> SpecSettings:
        """The launch's speculation settings with this conversation's mode and draft length."""
        return replace(base, mode=self.spec_mode, draft_max=self.draft_max)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, fallback: ChatSettings) -> ChatSettings:
        """Settings saved earlier; keys this version does not know are ignored, missing ones
        come from `fallback`, so an older or newer database still opens."""
        try:
            raw: Any = json.loads(text) if text else {}
        except (ValueError, RecursionError):  # a database edited by hand or damaged
            return fallback
        if not isinstance(raw, dict):
            return fallback
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        try:
            if "spec_mode" in values:
                values["spec_mode"] = SpecMode(values["spec_mode"])
            return replace(fallback, **values)
        except (ValueError, TypeError, LocalspecError):
            return fallback

    @classmethod
    def from_form(cls, values: dict[str, str]) -> ChatSettings:
        """Settings from the text fields of the settings screen, with messages naming the field."""

        def number(key: str, kind: Callable[[str], Any]) -> Any:
            try:
                return kind(values[key].strip())
            except ValueError:
                raise SettingsError(f"{key.replace('_', ' ')} must be a number") from None

        try:
            return cls(
                system=values["system"],
                spec_mode=SpecMode(values["spec_mode"]),
                draft_max=number("draft_max", int),
                temperature=number("temperature", float),
                top_p=number("top_p", float),
                max_tokens=number("max_tokens", int),
            )
        except LocalspecError as exc:
            if isinstance(exc, SettingsError):
                raise
            raise SettingsError(str(exc)) from None


@dataclass(frozen=True)
class Launch:
    """Everything `localspec chat` resolved before the app starts.

    `given` names the `ChatSettings` fields whose options were typed on the command line:
    in `conversation` they replace its saved settings (see `over`). The others are the
    command's defaults, and a saved conversation keeps its own.

    With `server`, a running server answers and nothing loads here: `runtime` only
    describes what was asked for, until the server says what it runs.
    """

    runtime: RuntimeSettings
    model_label: str
    defaults: ChatSettings = field(default_factory=ChatSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    spec: SpecSettings = field(default_factory=SpecSettings)  # auto, as on every surface
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    conversation: int | None = None
    offline: bool = False
    given: frozenset[str] = frozenset()
    server: RemoteSettings | None = None

    def over(self, saved: ChatSettings) -> ChatSettings:
        """`saved` settings with the options typed on the command line in their place."""
        return replace(saved, **{name: getattr(self.defaults, name) for name in self.given})
