"""The model registry: `models.toml` (shipped) merged with the user's own file.

Models name a GGUF file on the Hugging Face Hub (repo, file, pinned revision, size, SHA-256,
mirrors) or a local path; pairs name a target and a draft from the same family, with the
settings worth starting from. The user file (`models.toml` in the platformdirs config dir)
adds entries or replaces shipped ones by name, so a user can pin another revision or point a
name at a GGUF on disk without editing the package.

An entry is *verified* when localspec can check every byte it downloads: a pinned revision,
the size and the SHA-256, all read from the Hub. The shipped file must say `verified = false`
on any entry that lacks one of them, so an incomplete entry is never mistaken for a checked
one; `pull` then trusts the first download and holds later ones to it (see `trust`). A
`tokenizer` names the vocabulary an entry's GGUF carries, so a pair whose two sides name
different tokenizers is refused when the registry loads, before anything is downloaded; the
token-by-token check on the files themselves (`compat`) stays the final word once they are.
A `vocab_size` (the token count of the GGUF, padding included) is held to the same rule: one
family can pad its vocabulary to different sizes. Declared sizes must agree here; entries
padded apart (Qwen2.5-Coder 7B+ and its 0.5B draft) declare none, and the check on the files
accepts them where every extra id is padding (`localspec.llama.model.MAX_PADDING`).
"""

from __future__ import annotations

import difflib
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from localspec.errors import LocalspecError, UsageError

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODEL_KEYS = {
    "repo",
    "file",
    "revision",
    "size",
    "sha256",
    "context_length",
    "license",
    "mirrors",
    "path",
    "description",
    "verified",
    "mtp",
    "tokenizer",
    "vocab_size",
}
_PAIR_KEYS = {"target", "draft", "settings", "description"}


class RegistryError(LocalspecError):
    """A registry file is unreadable or inconsistent; the message names the file and entry."""


class UnknownModelError(UsageError):
    """A name that is neither a registry entry nor an existing file."""


@dataclass(frozen=True)
class PyPIMirror:
    """A file published as ordered chunks inside PyPI wheels (`data/*.bin` members)."""

    packages: tuple[str, ...]


@dataclass(frozen=True)
class ModelEntry:
    """One GGUF file: on the Hub (repo/file/revision) or on disk (path)."""

    name: str
    repo: str | None = None
    file: str | None = None
    revision: str = "main"
    size: int | None = None
    sha256: str | None = None
    context_length: int | None = None
    license: str | None = None
    description: str = ""
    mirrors: tuple[PyPIMirror, ...] = ()
    path: Path | None = None
    # the registry vouches for revision, size and SHA-256; an entry that lacks one is never
    # verified, whatever it says (a local path has nothing to verify)
    verified: bool = True
    # the GGUF carries multi-token-prediction (NextN) layers: the target drafts for itself
    mtp: bool = False
    # the vocabulary family its GGUF carries ("qwen3", "llama3", ...): pairs must agree
    tokenizer: str | None = None
    # how many tokens the GGUF's vocabulary lists (padding included): pairs that declare it
    # must agree (entries padded apart declare none; the check on the files decides)
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if self.verified and not self.complete:
            object.__setattr__(self, "verified", False)

    @property
    def pinned(self) -> bool:
        return bool(_COMMIT.match(self.revision))

    @property
    def complete(self) -> bool:
        """A Hub file with everything needed to check a download: pinned, sized, hashed."""
        return self.path is None and self.pinned and bool(self.sha256) and bool(self.size)


@dataclass(frozen=True)
class PairEntry:
    """A target and a draft that share a tokenizer, with recommended starting settings."""

    name: str
    target: str
    draft: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelEntry]
    pairs: dict[str, PairEntry]
    default_pair: str
    sources: tuple[Path, ...]

    def unknown_message(self, name: str, kind: str) -> str:
        names = [*self.pairs, *self.models]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (
            f"unknown {kind} {name!r}: {hint}`localspec models` lists the known names; "
            f"a GGUF path works too"
        )


def user_registry_path() -> Path:
    return Path(platformdirs.user_config_dir("localspec")) / "models.toml"


def _read(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # the message carries "(at line N, column M)"
        raise RegistryError(f"{path}: invalid TOML: {exc}") from None


def _check_table(where: str, raw: Any, allowed: set[str]) -> None:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where} must be a table")
    unknown = set(raw) - allowed
    if unknown:
        raise RegistryError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")


def _model(source: Path, name: str, raw: Any, *, shipped: bool = False) -> ModelEntry:
    where = f"{source}: [models.{name!r}]"
    _check_table(where, raw, _MODEL_KEYS)
    tokenizer = raw.get("tokenizer")
    if tokenizer is not None and (not isinstance(tokenizer, str) or not tokenizer):
        raise RegistryError(f"{where}: `tokenizer` must be a non-empty string")
    for flag in ("verified", "mtp"):
        if flag in raw and not isinstance(raw[flag], bool):
            raise RegistryError(f"{where}: `{flag}` must be true or false")
    if "path" in raw:
        if "verified" in raw:
            raise RegistryError(
                f"{where}: `verified` is for Hub files (a local path has nothing to verify)"
            )
        path = Path(str(raw["path"])).expanduser()
        if not path.is_absolute():
            path = source.parent / path
        return ModelEntry(
            name=name,
            path=path,
            description=str(raw.get("description", "")),
            mtp=bool(raw.get("mtp", False)),
            tokenizer=tokenizer,
            vocab_size=_optional_int(where, raw, "vocab_size"),
        )
    if not isinstance(raw.get("repo"), str) or not isinstance(raw.get("file"), str):
        raise RegistryError(
            f"{where} needs `repo` and `file` (a Hub file) or `path` (a local GGUF)"
        )
    if "sha256" in raw and not _SHA256.match(str(raw["sha256"]).lower()):
        raise RegistryError(f"{where}: `sha256` must be 64 hex digits, not {raw['sha256']!r}")
    mirrors = []
    for mirror in raw.get("mirrors", []):
        if not isinstance(mirror, dict) or mirror.get("kind") != "pypi":
            raise RegistryError(f'{where}: a mirror is {{ kind = "pypi", packages = [...] }}')
        packages = mirror.get("packages")
        if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
            raise RegistryError(f"{where}: mirror `packages` must be a list of pip requirements")
        mirrors.append(PyPIMirror(tuple(packages)))
    entry = ModelEntry(
        name=name,
        repo=raw["repo"],
        file=raw["file"],
        revision=str(raw.get("revision", "main")),
        size=_optional_int(where, raw, "size"),
        sha256=str(raw["sha256"]).lower() if "sha256" in raw else None,
        context_length=_optional_int(where, raw, "context_length"),
        license=raw.get("license"),
        description=str(raw.get("description", "")),
        mirrors=tuple(mirrors),
        verified=bool(raw.get("verified", True)),
        mtp=bool(raw.get("mtp", False)),
        tokenizer=tokenizer,
        vocab_size=_optional_int(where, raw, "vocab_size"),
    )
    _check_verified(where, raw, entry, shipped=shipped)
    if mirrors and not (entry.pinned and entry.sha256 and entry.size):
        raise RegistryError(
            f"{where}: a mirror needs a pinned 40-hex `revision`, `size` and `sha256`, "
            f"so the joined file can be verified and placed in the Hugging Face cache"
        )
    return entry


def _check_verified(where: str, raw: dict[str, Any], entry: ModelEntry, *, shipped: bool) -> None:
    """`verified = true` is a promise every download will be checked: refuse it unless the
    entry can keep it. The shipped registry must also say `verified = false` out loud, so a
    reader of models.toml never takes an unchecked entry for a checked one; a user's file may
    leave it out (its incomplete entries are unverified all the same)."""
    if entry.complete:
        return
    missing = [
        label
        for label, present in (
            ("a pinned 40-hex `revision`", entry.pinned),
            ("`size`", bool(entry.size)),
            ("`sha256`", bool(entry.sha256)),
        )
        if not present
    ]
    if raw.get("verified") is True or (shipped and "verified" not in raw):
        raise RegistryError(
            f"{where} lacks {', '.join(missing)}: read them from the Hub, or say "
            f"`verified = false` (pull then trusts the first download and checks later ones)"
        )


def _optional_int(where: str, raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or value <= 0:
        raise RegistryError(f"{where}: `{key}` must be a positive integer")
    return value


def _pair(source: Path, name: str, raw: Any) -> PairEntry:
    where = f"{source}: [pairs.{name!r}]"
    _check_table(where, raw, _PAIR_KEYS)
    if not isinstance(raw.get("target"), str) or not isinstance(raw.get("draft"), str):
        raise RegistryError(f"{where} needs `target` and `draft` model names")
    settings = raw.get("settings", {})
    if not isinstance(settings, dict):
        raise RegistryError(f"{where}: `settings` must be a table")
    return PairEntry(name, raw["target"], raw["draft"], settings, str(raw.get("description", "")))


def _check_tokenizers(pair: PairEntry, target: ModelEntry, draft: ModelEntry) -> None:
    """Refuse a pair whose sides are known to speak different vocabularies: every drafted
    token would be rejected, and the mismatch would only show after gigabytes of download.
    Entries that name neither pass here; the check on the files (`compat`) catches them."""
    if target.tokenizer and draft.tokenizer and target.tokenizer != draft.tokenizer:
        raise RegistryError(
            f"pair {pair.name!r}: target {target.name!r} uses the {target.tokenizer} tokenizer "
            f"but draft {draft.name!r} uses {draft.tokenizer}; a draft must share the "
            f"target's tokenizer (same token ids), so pick a draft from the target's family"
        )
    if target.vocab_size and draft.vocab_size and target.vocab_size != draft.vocab_size:
        raise RegistryError(
            f"pair {pair.name!r}: target {target.name!r} lists {target.vocab_size} tokens but "
            f"draft {draft.name!r} lists {draft.vocab_size}; the vocabulary check on the files "
            f"requires the same tokens, so this pair would be refused once downloaded"
        )


def _builtin_text() -> str:
    return resources.files("localspec.models").joinpath("models.toml").read_text()


_MAX_REGISTRY_BYTES = 1 << 20


def _user_text(user: Path) -> str:
    """The user's registry file, refused unless a regular file of a sane size: a FIFO would
    block every command at start-up, a device could be read forever."""
    try:
        info = user.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_REGISTRY_BYTES:
            kind = "over 1 MiB" if stat.S_ISREG(info.st_mode) else "not a regular file"
            raise RegistryError(f"{user} is {kind}: replace it with a TOML file (or remove it)")
        return user.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise RegistryError(f"cannot read {user}: {reason}") from None


def load_registry(user_file: Path | None = None) -> Registry:
    """The shipped registry with the user's file (if any) merged over it by entry name."""
    builtin_path = Path(str(resources.files("localspec.models").joinpath("models.toml")))
    layers = [(builtin_path, _read(builtin_path, _builtin_text()))]
    user = user_file or user_registry_path()
    if user.exists():
        layers.append((user, _read(user, _user_text(user))))
    models: dict[str, ModelEntry] = {}
    pairs: dict[str, PairEntry] = {}
    default_pair = ""
    for index, (source, data) in enumerate(layers):
        unknown = set(data) - {"models", "pairs", "default_pair"}
        if unknown:
            raise RegistryError(f"{source}: unknown top-level keys {sorted(unknown)}")
        for name, raw in data.get("models", {}).items():
            models[name] = _model(source, name, raw, shipped=index == 0)
        for name, raw in data.get("pairs", {}).items():
            pairs[name] = _pair(source, name, raw)
        default_pair = str(data.get("default_pair", default_pair))
    for pair in pairs.values():
        for role in ("target", "draft"):
            if getattr(pair, role) not in models:
                raise RegistryError(
                    f"pair {pair.name!r} names unknown {role} {getattr(pair, role)!r}"
                )
        _check_tokenizers(pair, models[pair.target], models[pair.draft])
    if default_pair not in pairs:
        raise RegistryError(f"default_pair {default_pair!r} is not a pair in the registry")
    return Registry(models, pairs, default_pair, tuple(source for source, _ in layers))
