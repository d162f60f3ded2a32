"""The output files and programs every `bench` surface shares.

They live apart from `localspec.cli.bench`, the dispatcher: `bench`'s surfaces (`agent`,
`editor`, `processes`) are imported by it, and would otherwise import it back.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.paths import write_private


def check_writable(*paths: Path | None) -> None:
    """Refuse an output file whose folder is missing before minutes of benchmarking."""
    for path in paths:
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: the folder {path.parent} does not exist")


def write_file(path: Path, text: str) -> None:
    try:
        write_private(path, text, own_folder=False)  # what the user works on: theirs alone
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc


def on_path(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


def model_settings(settings: RuntimeSettings) -> dict[str, Any]:
    """The models of a bench's run as every `--json` document names them."""
    return {
        "target": str(settings.target),
        "draft": str(settings.draft) if settings.draft else None,
        "n_ctx": settings.n_ctx,
    }
