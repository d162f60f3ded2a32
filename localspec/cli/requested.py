"""What `-m/--target/--draft` name, resolved in the registry without loading or fetching.

Loading the models here (`options.model_files`) and deciding whether a running server already
serves them (`server_choice`) read the same answer, so the two cannot disagree about which
files a command line means. Only the registry is imported: no llama.cpp.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.errors import UsageError
from localspec.models import load_registry, model_entry, pair_or_model
from localspec.models.registry import ModelEntry


def model_entries(args: argparse.Namespace) -> tuple[ModelEntry, ModelEntry | None]:
    """The target and draft entries: `-m`'s pair or model (default: the default pair), or
    `--target` (never both: one would be dropped), then `--draft`."""
    if args.model and args.target:
        raise UsageError(
            f"-m {args.model} and --target {args.target} both name the target: give one "
            "(-m NAME --draft FILE keeps the pair's target and changes its draft)"
        )
    registry = load_registry()
    target, draft, _pair = pair_or_model(args.model, registry)
    if args.target:
        target = model_entry(args.target, registry)
        draft = None
    if args.draft:
        draft = model_entry(args.draft, registry)
    return target, draft


def file_name(entry: ModelEntry) -> str:
    """The name the entry's file has on disk (what a server reports as its `target`)."""
    if entry.path is not None:
        return entry.path.name
    return Path(entry.file or entry.name).name
