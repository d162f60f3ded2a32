"""`localspec pull` and `localspec models`: fetch registry files, and show what is installed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from localspec.models import load_registry, model_entry
from localspec.models.pull import installed_path, pull
from localspec.models.registry import ModelEntry, Registry


def _size(n: int | None) -> str:
    return f"{n / 2**30:.2f} GiB" if n else "?"


def _flags(model: dict[str, Any]) -> str:
    """What a reader of the list should know beyond the size: whether localspec checks the
    file against values read from the Hub, and whether the model drafts for itself (MTP)."""
    flags = []
    if model["revision"] is not None and not model["verified"]:
        unpinned = ", revision not pinned" if model["revision"] == "main" else ""
        flags.append(f"unverified: first download trusted{unpinned}")
    if model["mtp_layers"]:  # what the installed file holds
        flags.append(str(model["mtp_layers"]))
    elif model["mtp"] and model["installed"]:
        flags.append("the registry says MTP, but the file has no MTP layers")
    elif model["mtp"]:
        flags.append("MTP: drafts for itself")
    return "".join(f"  ({flag})" for flag in flags)


def _entries(names: list[str], registry: Registry) -> list[ModelEntry]:
    entries: dict[str, ModelEntry] = {}
    for name in names:
        if name in registry.pairs:
            pair = registry.pairs[name]
            for member in (pair.target, pair.draft):
                entries[member] = registry.models[member]
        else:
            entry = model_entry(name, registry)
            entries[entry.name] = entry
    return list(entries.values())


def pull_command(args: argparse.Namespace) -> int:
    registry = load_registry()
    for entry in _entries(args.names or [registry.default_pair], registry):
        pulled = pull(entry, offline=args.offline)
        size = pulled.path.stat().st_size
        print(f"{entry.name}\t{pulled.source}\t{_size(size)}\t{pulled.path}")
    return 0


def describe(registry: Registry) -> dict[str, Any]:
    """Models and pairs with install state and, for installed pairs, the compatibility check.

    Reading an installed file's header and checking a pair's vocabularies need gguf and
    llama.cpp, imported only then: a list of what is not installed yet starts at once."""
    models: dict[str, Any] = {}
    for name, entry in registry.models.items():
        path = installed_path(entry)
        models[name] = {
            "source": str(entry.path) if entry.path else f"{entry.repo}/{entry.file}",
            "revision": None if entry.path else entry.revision,
            "size": path.stat().st_size if path else entry.size,
            "installed": path is not None,
            "path": str(path) if path else None,
            "context_length": entry.context_length,
            "license": entry.license,
            "mirrors": len(entry.mirrors),
            "verified": entry.verified,
            "mtp": entry.mtp,
            "tokenizer": entry.tokenizer,
            "vocab_size": entry.vocab_size,
            "description": entry.description,
            # what the installed file's MTP layers allow (None: none, or not installed)
            "mtp_layers": _mtp_summary(path) if path else None,
        }
    pairs: dict[str, Any] = {}
    for name, pair in registry.pairs.items():
        installed = models[pair.target]["installed"] and models[pair.draft]["installed"]
        problems = (
            _pair_problems(models[pair.target]["path"], models[pair.draft]["path"])
            if installed
            else None
        )
        pairs[name] = {
            "target": pair.target,
            "draft": pair.draft,
            "installed": installed,
            "compatible": None if problems is None else not problems,
            "problems": problems or [],
            "settings": dict(pair.settings),
            "verified": models[pair.target]["verified"] and models[pair.draft]["verified"],
            "default": name == registry.default_pair,
            "description": pair.description,
        }
    return {"pairs": pairs, "models": models, "registry_files": [str(p) for p in registry.sources]}


def _mtp_summary(path: Path) -> str | None:
    from localspec.llama.mtp_layers import mtp_summary  # noqa: PLC0415  (gguf, llama.cpp)

    return mtp_summary(path)


def _pair_problems(target: str, draft: str) -> list[str]:
    from localspec.models.compat import pair_problems  # noqa: PLC0415  (llama.cpp)

    return pair_problems(Path(target), Path(draft))


def models_command(args: argparse.Namespace) -> int:
    report = describe(load_registry())
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("PAIRS")
    for name, pair in report["pairs"].items():
        state = "not installed"
        if pair["installed"]:
            state = "installed, compatible" if pair["compatible"] else "installed, INCOMPATIBLE"
        star = " (default)" if pair["default"] else ""
        trust = "" if pair["verified"] else ", unverified"
        print(f"  {name}{star}: {pair['target']} + {pair['draft']} [{state}{trust}]")
        for problem in pair["problems"]:
            print(f"      ! {problem}")
    print("MODELS")
    for name, model in report["models"].items():
        where = model["path"] if model["installed"] else "not installed"
        print(f"  {name}  {_size(model['size'])}  {where}{_flags(model)}")
    print("registry files: " + ", ".join(report["registry_files"]))
    return 0
