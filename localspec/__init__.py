"""localspec: a local coding-assistant runtime with exact, speculative decoding on llama.cpp.

The public API every surface (CLI, server, TUI) uses: build a `Runtime`, turn a prompt into
tokens, and iterate `Runtime.generate(GenerationRequest(...))` for `TextChunk` events and a
final `Finished` carrying `GenerationStats`.
"""

from localspec.errors import LocalspecError
from localspec.runtime import Message, Runtime, RuntimeSettings
from localspec.spec.engine import (
    Event,
    Finished,
    GenerationRequest,
    SpecMode,
    SpecSettings,
    TextChunk,
)
from localspec.spec.sampling import SamplingSettings
from localspec.spec.stats import GenerationStats

__version__ = "0.1.0"

__all__ = [
    "Event",
    "Finished",
    "GenerationRequest",
    "GenerationStats",
    "LocalspecError",
    "Message",
    "Runtime",
    "RuntimeSettings",
    "SamplingSettings",
    "SpecMode",
    "SpecSettings",
    "TextChunk",
    "__version__",
]
