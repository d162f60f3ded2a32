"""Turn what the user typed (`-m`, `--target`, `--draft`) into a registry entry.

A reference is a pair or model name from the registry, a path to a GGUF file, or a Hub file
written `owner/repo/file.gguf[@revision]` (an ad-hoc entry without a known checksum).
"""

from __future__ import annotations

import re
from pathlib import Path

from localspec.models.registry import ModelEntry, PairEntry, Registry, UnknownModelError

_HUB_FILE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/(?P<file>[^@]+\.gguf)(?:@(?P<rev>[\w.-]+))?$")


def model_entry(reference: str, registry: Registry) -> ModelEntry:
    """The entry a model reference names (paths need not exist yet: loading checks them)."""
    if reference in registry.models:
        return registry.models[reference]
    match = _HUB_FILE.match(reference)
    if match is not None and not Path(reference).expanduser().exists():
        return ModelEntry(
            name=reference,
            repo=match["repo"],
            file=match["file"],
            revision=match["rev"] or "main",
        )
    path = Path(reference).expanduser()
    if path.exists() or path.suffix == ".gguf" or "/" in reference:
        return ModelEntry(name=path.name, path=path)
    raise UnknownModelError(registry.unknown_message(reference, "model"))


def pair_or_model(
    reference: str | None, registry: Registry
) -> tuple[ModelEntry, ModelEntry | None, PairEntry | None]:
    """(target, draft or None, pair or None) for `-m`: a pair gives both, a model the target."""
    name = reference or registry.default_pair
    if name in registry.pairs:
        pair = registry.pairs[name]
        return registry.models[pair.target], registry.models[pair.draft], pair
    return model_entry(name, registry), None, None
