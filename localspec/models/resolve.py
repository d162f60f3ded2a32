"""Turn a model reference from the command line into a local GGUF path.

A reference is either a path to a GGUF file or a Hub file written `owner/repo/file.gguf`,
optionally pinned with `@revision`. Hub files go through `huggingface_hub.hf_hub_download`,
which downloads on first use; a cached copy is used without asking the Hub. The registry
of named pairs (`models.toml`) builds on this.
"""

from __future__ import annotations

import re
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from localspec.errors import ModelFileError

DEFAULT_TARGET = (
    "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    "@f86cb2c1fa58255f8052cc32aeede1b7482d4361"
)
DEFAULT_DRAFT = (
    "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    "@ebb2015119c907b064c512bf053e945850b5875f"
)

_HUB_FILE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)/(?P<file>[^@]+\.gguf)(?:@(?P<rev>[\w.-]+))?$")


def resolve_model(reference: str | Path) -> Path:
    """A local path for `reference`; raises `ModelFileError` saying how to get the file."""
    path = Path(reference).expanduser()
    if path.exists():
        return path
    match = _HUB_FILE.match(str(reference))
    if match is None:
        raise ModelFileError(
            f"model file not found: {reference} (give a GGUF path, or a Hub file as "
            f"owner/repo/file.gguf)"
        )
    repo, filename, revision = match["repo"], match["file"], match["rev"]
    try:
        # the cache first: no network round trip on every start, and no retries when offline
        return Path(
            hf_hub_download(
                repo_id=repo, filename=filename, revision=revision, local_files_only=True
            )
        )
    except LocalEntryNotFoundError:
        pass
    try:
        return Path(hf_hub_download(repo_id=repo, filename=filename, revision=revision))
    except LocalEntryNotFoundError:
        raise ModelFileError(
            f"{repo}/{filename} is not in the Hugging Face cache and the Hub cannot be reached: "
            f"connect to the network, or place the file in the cache (HF_HUB_CACHE) first"
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
        raise ModelFileError(
            f"{repo}/{filename}: {exc.__class__.__name__}: check the name"
        ) from None
    except HfHubHTTPError as exc:
        raise ModelFileError(f"downloading {repo}/{filename} failed: {exc}") from None
