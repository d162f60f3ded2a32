"""What answers the app's turns: the models loaded here, or a running server.

`ModelHost` owns one `Backend`: an in-process `Runtime` (loading it, swapping the model pair,
fetching missing files) or, when `localspec chat` uses a server, a `RemoteServer` (connecting
is the "load"; the server's models cannot be swapped from here). `run_turn` and `measure`
work the same on either: both backends yield the engine's events.

A Runtime runs one generation at a time, so every use from a worker thread holds `lock` (a
server serialises its own; holding the lock there keeps the order of measure and turn).
Everything here blocks for seconds (loading, connecting) or minutes (downloads) and runs on
worker threads; results reach the UI through the callbacks it passes in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from localspec import (
    ChatRequest,
    Event,
    GenerationRequest,
    LocalspecError,
    Message,
    RemoteServer,
    RemoteSettings,
    Runtime,
    RuntimeSettings,
    SamplingSettings,
    SpecSettings,
)
from localspec.constraints import Constraint
from localspec.models import (
    ModelEntry,
    Progress,
    installed_path,
    load_registry,
    pair_or_model,
    pull,
)
from tui.settings import RuntimeFactory

SERVER_MODELS = (
    "the server runs its own models: the app cannot switch them. Restart the server with "
    "others, or restart `localspec chat --no-server` to load models here"
)


@dataclass(frozen=True)
class Prompt:
    """A conversation as the backend sends it: its size in tokens (None where the backend
    cannot tell before the answer), and for the in-process backend its tokens."""

    size: int | None
    tokens: tuple[int, ...] = ()


class Backend(Protocol):
    """One turn's needs: the window (0: unknown), the prompt's size, the answer's events."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def counts(self) -> bool:
        """Whether prompts are measured before an answer (a generic server's are not)."""
        ...

    def prompt(self, messages: Sequence[Message]) -> Prompt: ...

    def generate(
        self,
        prompt: Prompt,
        request: ChatRequest,
        should_stop: Callable[[], bool],
        constraint: Constraint | None = None,
    ) -> Generator[Event, None, None]: ...


@dataclass(frozen=True)
class InProcess:
    """The models in this process."""

    runtime: Runtime
    counts = True

    @property
    def n_ctx(self) -> int:
        return self.runtime.n_ctx

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        tokens = self.runtime.prompts.chat_prompt(messages)
        return Prompt(len(tokens), tuple(tokens))

    def generate(
        self,
        prompt: Prompt,
        request: ChatRequest,
        should_stop: Callable[[], bool],
        constraint: Constraint | None = None,
    ) -> Generator[Event, None, None]:
        engine_request = GenerationRequest(
            prompt=list(prompt.tokens),
            max_tokens=request.max_tokens,
            sampling=request.sampling or SamplingSettings(),
            spec=request.spec or SpecSettings(),
            stop=request.stop,
            ignore_eos=request.ignore_eos,
            route="chat",
            constraint=constraint,
        )
        return self.runtime.generate(engine_request, should_stop)


@dataclass(frozen=True)
class Remote:
    """A server: its answers stream over HTTP; closing the stream cancels there."""

    server: RemoteServer

    @property
    def n_ctx(self) -> int:
        return self.server.n_ctx

    @property
    def counts(self) -> bool:
        return self.server.counts

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        return Prompt(self.server.prompt_tokens(messages))

    def generate(
        self,
        prompt: Prompt,
        request: ChatRequest,
        should_stop: Callable[[], bool],
        constraint: Constraint | None = None,
    ) -> Generator[Event, None, None]:
        if constraint is not None:  # a server's chat endpoint takes no Lark grammar here
            raise LocalspecError(
                "/edit generates under a grammar of your files, which needs the models in "
                "this process: ask without /edit, or start localspec chat without --server"
            )
        return self.server.chat(request, should_stop)


PROMPTS_KEPT = 4  # a conversation as measured before a turn, as sent, and after it


class Remembered:
    """A backend whose prompt for a conversation is rendered and counted once: the context
    meter measures a conversation before a turn and the turn sends the same one, which on a
    server is an `/apply-template` and a `/tokenize` each time, and locally a render and a
    tokenization of the whole conversation."""

    def __init__(self, inner: Backend, kept: OrderedDict[tuple[Message, ...], Prompt]) -> None:
        self.inner = inner
        self.kept = kept

    @property
    def n_ctx(self) -> int:
        return self.inner.n_ctx

    @property
    def counts(self) -> bool:
        return self.inner.counts

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        key = tuple(messages)
        if key in self.kept:
            self.kept.move_to_end(key)
            return self.kept[key]
        prompt = self.inner.prompt(messages)
        self.kept[key] = prompt
        while len(self.kept) > PROMPTS_KEPT:
            self.kept.popitem(last=False)
        return prompt

    def generate(
        self,
        prompt: Prompt,
        request: ChatRequest,
        should_stop: Callable[[], bool],
        constraint: Constraint | None = None,
    ) -> Generator[Event, None, None]:
        return self.inner.generate(prompt, request, should_stop, constraint)


class ModelHost:
    """Owns the backend (or none, while loading or connecting) and serialises access to it."""

    def __init__(
        self,
        factory: RuntimeFactory,
        settings: RuntimeSettings,
        server: RemoteSettings | None = None,
    ) -> None:
        self.factory = factory
        self.settings = settings
        self.server = server
        self.runtime: Runtime | None = None
        self.remote: RemoteServer | None = None
        self.lock = threading.Lock()
        # the backend's prompts by conversation (cleared whenever the backend changes)
        self._prompts: OrderedDict[tuple[Message, ...], Prompt] = OrderedDict()

    @property
    def backend(self) -> Backend | None:
        inner: Backend | None = None
        if self.runtime is not None:
            inner = InProcess(self.runtime)
        elif self.remote is not None:
            inner = Remote(self.remote)
        return None if inner is None else Remembered(inner, self._prompts)

    @property
    def label(self) -> str | None:
        """The served model's short name once connected (in-process: None, the launch's)."""
        return None if self.remote is None else f"{self.remote.served.label} (served)"

    @property
    def missing(self) -> str:
        """Why there is no backend, and what to do."""
        if self.server is None:
            return "no model is loaded: pick one with f3"
        return (
            f"the server at {self.server.address} is not connected: start it, then press f3 "
            f"to connect again (or restart with --no-server)"
        )

    def load(self, notify: Callable[[str], None], settings: RuntimeSettings | None = None) -> None:
        """Close the current backend (if any) and load `settings` (default: the current),
        or connect to the server again."""
        with self.lock:
            self._close_runtime()
            self.remote = None
            self._prompts.clear()
            if self.server is not None:
                self.remote = RemoteServer(self.server).connect()
                self.settings = _described(self.remote, self.settings)
                return
            wanted = settings or self.settings
            self.runtime = self.factory(wanted, notify)
            self.runtime.watch.surface = "tui"  # its history and guard say "tui", not "chat"
            self.settings = wanted

    def close(self) -> None:
        """Free the models, after the generation or load that holds the lock has ended (a
        thread still inside llama.cpp must not have its model freed under it)."""
        with self.lock:
            self._close_runtime()

    def _close_runtime(self) -> None:
        self._prompts.clear()
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None

    def measure(self, messages: list[Message]) -> tuple[int, int]:
        """Tokens the rendered conversation takes, and the window; (0, 0) when there is no
        backend, or one that cannot count before an answer."""
        with self.lock:
            backend = self.backend
            if backend is None or not backend.counts:
                return 0, 0
            if not messages:
                return 0, backend.n_ctx
            size = backend.prompt(messages).size
            return (0, 0) if size is None else (size, backend.n_ctx)


def _described(server: RemoteServer, base: RuntimeSettings) -> RuntimeSettings:
    """What the server runs, in the terms of a local load (the settings screen asks whether
    there is a draft; nothing is loaded from these)."""
    served = server.served
    return replace(
        base,
        target=Path(str(served.meta.get("target") or served.model_id or "served")),
        draft=Path(str(served.meta["draft"])) if served.has_draft else None,
        n_ctx=served.n_ctx or base.n_ctx,
    )


@dataclass(frozen=True)
class Choice:
    """A pair or a single model the picker offers."""

    name: str
    target: ModelEntry
    draft: ModelEntry | None
    description: str

    @property
    def missing(self) -> list[ModelEntry]:
        entries = [self.target] if self.draft is None else [self.target, self.draft]
        return [e for e in entries if installed_path(e) is None]


def choices() -> list[Choice]:
    """The registry's pairs, then its models on their own (no draft)."""
    registry = load_registry()
    found = []
    for name, pair in registry.pairs.items():
        target, draft, _ = pair_or_model(name, registry)
        found.append(Choice(name, target, draft, pair.description))
    for name, entry in registry.models.items():
        found.append(Choice(name, entry, None, entry.description))
    return found


def fetch(
    entry: ModelEntry, offline: bool, report: Callable[[str], None], progress: Progress
) -> Path:
    """The entry's file, downloaded first when missing (never with --offline).

    A file already here is used as it is, like `localspec chat` does at start: hashing a
    multi-GB cached file would hold the picker for a minute.
    """
    pulled = pull(entry, offline=offline, verify_cached=False, report=report, progress=progress)
    return pulled.path


def settings_for(
    choice: Choice,
    base: RuntimeSettings,
    offline: bool,
    report: Callable[[str], None],
    progress: Progress,
) -> RuntimeSettings:
    """Runtime settings for `choice`, fetching missing files first (never with --offline)."""
    target = fetch(choice.target, offline, report, progress)
    draft = None if choice.draft is None else fetch(choice.draft, offline, report, progress)
    return replace(base, target=target, draft=draft)
