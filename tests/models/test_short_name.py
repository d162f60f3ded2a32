"""`short_name`: what a surface shows for the model the user picked, never a long path."""

from __future__ import annotations

from pathlib import Path

from localspec.models import ModelEntry, load_registry, short_name
from localspec.models.registry import user_registry_path


def _nowhere(_entry: ModelEntry) -> Path | None:
    return None


def test_registry_names_stay_as_typed() -> None:
    registry = load_registry()
    pair = registry.default_pair
    model = registry.pairs[pair].target
    assert short_name(pair, registry, _nowhere) == pair
    assert short_name(model, registry, _nowhere) == model


def test_paths_and_hub_files_show_the_file_stem(tmp_path: Path) -> None:
    registry = load_registry()
    name = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M"
    given = tmp_path / "x" / "y" / f"{name}.gguf"
    assert short_name(str(given), registry, _nowhere) == name  # missing: named all the same
    given.parent.mkdir(parents=True)
    given.write_bytes(b"GGUF")
    assert short_name(str(given), registry, _nowhere) == name
    assert short_name(f"Qwen/Qwen2.5-Coder-GGUF/{name}.gguf@main", registry, _nowhere) == name
    other = tmp_path / "weights.bin"
    other.write_bytes(b"")
    assert short_name(str(other), registry, _nowhere) == "weights.bin"


def test_a_registry_models_file_given_by_path_shows_the_models_name(
    tmp_path: Path, tiny_target: Path
) -> None:
    registry_file = user_registry_path()
    registry_file.parent.mkdir(parents=True)
    registry_file.write_text(f'[models.tiny-target]\npath = "{tiny_target}"\n')
    registry = load_registry()
    # the default lookup: on disk for path entries, the Hub cache (no network) for the others
    assert short_name(str(tiny_target), registry) == "tiny-target"
    # through a link, as the Hub cache's snapshot files are links to its blobs
    link = tmp_path / "link.gguf"
    link.symlink_to(tiny_target)
    assert short_name(str(link), registry) == "tiny-target"
    # a Hub entry found in the cache, by the lookup `installed_path` does
    cached = tmp_path / "cache" / "model-q4.gguf"
    cached.parent.mkdir()
    cached.write_bytes(b"GGUF")
    hub_model = registry.pairs[registry.default_pair].draft

    def in_cache(entry: ModelEntry) -> Path | None:
        return cached if entry.name == hub_model else None

    assert short_name(str(cached), registry, in_cache) == hub_model
