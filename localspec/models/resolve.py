"""Turn what the user typed (`-m`, `--target`, `--draft`) into a registry entry.

A reference is a pair or model name from the registry, a path to a GGUF file, or a Hub file
written `owner/repo/file.gguf[@revision]` (an ad-hoc entry without a known checksum).
`short_name` turns one back into what a surface shows: never a long path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from localspec.models.pull import installed_path
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


def short_name(
    reference: str,
    registry: Registry,
    installed: Callable[[ModelEntry], Path | None] = installed_path,
) -> str:
    """The name a surface shows for a reference: its registry name, else its file's stem.

    A path to a registry model's file is named as that model (`installed` says where each
    model's file is; the default looks on disk and in the Hub cache, without the network), so
    `--target ~/.cache/.../qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` reads `qwen2.5-coder-1.5b`.
    """
    if reference in registry.pairs or reference in registry.models:
        return reference
    match = _HUB_FILE.match(reference)
    path = Path(reference).expanduser()
    if match is not None and not path.exists():
        return Path(match["file"]).stem
    if path.is_file():
        same = path.resolve()
        for name, entry in registry.models.items():
            found = installed(entry)
            if found is not None and found.resolve() == same:
                return name
    return path.stem if path.suffix == ".gguf" else path.name
