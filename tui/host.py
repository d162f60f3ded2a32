"""The app's one `Runtime`: loading it, swapping the model pair, fetching missing files.

A Runtime runs one generation at a time, so every use from a worker thread holds `lock`.
Everything here blocks for seconds (loading) or minutes (downloads) and runs on worker threads;
results reach the UI through the callbacks it passes in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from localspec import Message, Runtime, RuntimeSettings
from localspec.models import (
    ModelEntry,
    Progress,
    installed_path,
    load_registry,
    pair_or_model,
    pull,
)
from tui.settings import RuntimeFactory


class ModelHost:
    """Owns the loaded runtime (or none, while loading) and serialises access to it."""

    def __init__(self, factory: RuntimeFactory, settings: RuntimeSettings) -> None:
        self.factory = factory
        self.settings = settings
        self.runtime: Runtime | None = None
        self.lock = threading.Lock()

    def load(self, notify: Callable[[str], None], settings: RuntimeSettings | None = None) -> None:
        """Close the current runtime (if any) and load `settings` (default: the current)."""
        with self.lock:
            self._close_runtime()
            wanted = settings or self.settings
            self.runtime = self.factory(wanted, notify)
            self.settings = wanted

    def close(self) -> None:
        """Free the models, after the generation or load that holds the lock has ended (a
        thread still inside llama.cpp must not have its model freed under it)."""
        with self.lock:
            self._close_runtime()

    def _close_runtime(self) -> None:
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None

    def measure(self, messages: list[Message]) -> tuple[int, int]:
        """Tokens the rendered conversation takes, and the window; (0, 0) when not loaded."""
        with self.lock:
            if self.runtime is None:
                return 0, 0
            if not messages:
                return 0, self.runtime.n_ctx
            return len(self.runtime.chat_prompt(messages)), self.runtime.n_ctx


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
