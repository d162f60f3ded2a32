"""models.toml at the repository root and the CLI's built-in defaults must name the same pair."""

from __future__ import annotations

import tomllib
from pathlib import Path

from localspec.models import DEFAULT_DRAFT, DEFAULT_TARGET

REGISTRY = Path(__file__).resolve().parents[2] / "models.toml"


def _reference(entry: dict[str, str]) -> str:
    return f"{entry['repo']}/{entry['file']}@{entry['revision']}"


def test_default_pair_matches_the_cli_defaults() -> None:
    registry = tomllib.loads(REGISTRY.read_text())
    pair = registry["pairs"][registry["default_pair"]]
    assert _reference(registry["models"][pair["target"]]) == DEFAULT_TARGET
    assert _reference(registry["models"][pair["draft"]]) == DEFAULT_DRAFT
