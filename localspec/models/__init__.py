"""Models and pairs: the registry, resolving references, fetching files, pair checks."""

from localspec.models.registry import (
    ModelEntry,
    PairEntry,
    Registry,
    RegistryError,
    UnknownModelError,
    load_registry,
)
from localspec.models.resolve import model_entry, pair_or_model

__all__ = [
    "ModelEntry",
    "PairEntry",
    "Registry",
    "RegistryError",
    "UnknownModelError",
    "load_registry",
    "model_entry",
    "pair_or_model",
]
