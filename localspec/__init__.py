"""localspec: a local coding-assistant runtime with exact, speculative decoding on llama.cpp.

The public API every surface (CLI, server, TUI) uses: build a `Runtime`, turn a prompt into
tokens, and iterate `Runtime.generate(GenerationRequest(...))` for `TextChunk` events and a
final `Finished` carrying `GenerationStats`. `RemoteServer(RemoteSettings(...)).chat(
ChatRequest(...))` yields the same events from a running server (`localspec serve`,
llama-server or any OpenAI-compatible endpoint).

Names are imported on first use (PEP 562), so `localspec --version` or a `complete` that
talks to a running server does not pay for loading llama.cpp and numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    "Constraint": "localspec.constraints.constraint",
    "ConstraintError": "localspec.errors",
    "LocalspecError": "localspec.errors",
    "Message": "localspec.messages",
    "Runtime": "localspec.runtime",
    "RuntimeSettings": "localspec.loading",
    "Event": "localspec.speculative.engine",
    "Finished": "localspec.speculative.engine",
    "GenerationRequest": "localspec.speculative.engine",
    "TextChunk": "localspec.speculative.engine",
    "SpecMode": "localspec.speculative.settings",
    "SpecSettings": "localspec.speculative.settings",
    "SamplingSettings": "localspec.speculative.sampling",
    "GenerationStats": "localspec.speculative.stats",
    "ChatRequest": "localspec.remote",
    "RemoteServer": "localspec.remote",
    "RemoteSettings": "localspec.remote",
    "ServerKind": "localspec.remote",
    "UNREPORTED": "localspec.remote",
}

if TYPE_CHECKING:
    from localspec.constraints.constraint import Constraint
    from localspec.errors import ConstraintError, LocalspecError
    from localspec.loading import RuntimeSettings
    from localspec.messages import Message
    from localspec.remote import UNREPORTED, ChatRequest, RemoteServer, RemoteSettings, ServerKind
    from localspec.runtime import Runtime
    from localspec.speculative.engine import Event, Finished, GenerationRequest, TextChunk
    from localspec.speculative.sampling import SamplingSettings
    from localspec.speculative.settings import SpecMode, SpecSettings
    from localspec.speculative.stats import GenerationStats


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'localspec' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "UNREPORTED",
    "ChatRequest",
    "Constraint",
    "ConstraintError",
    "Event",
    "Finished",
    "GenerationRequest",
    "GenerationStats",
    "LocalspecError",
    "Message",
    "RemoteServer",
    "RemoteSettings",
    "Runtime",
    "RuntimeSettings",
    "SamplingSettings",
    "ServerKind",
    "SpecMode",
    "SpecSettings",
    "TextChunk",
    "__version__",
]
