"""Models and pairs: the registry, resolving references, fetching files, pair checks.

Where a model's file is (`installed_path`: None when it is not on this machine) and fetching
it (`pull`, with one-line reports and an optional progress fraction) are the public API that
`localspec pull`, the other commands and the chat app all use.
"""

from localspec.models.pull import Progress, Pulled, Report, installed_path, pull
from localspec.models.registry import (
    ModelEntry,
    PairEntry,
    Registry,
    RegistryError,
    UnknownModelError,
    load_registry,
)
from localspec.models.resolve import model_entry, pair_or_model, short_name

__all__ = [
    "ModelEntry",
    "PairEntry",
    "Progress",
    "Pulled",
    "Registry",
    "RegistryError",
    "Report",
    "UnknownModelError",
    "installed_path",
    "load_registry",
    "model_entry",
    "pair_or_model",
    "pull",
    "short_name",
]
