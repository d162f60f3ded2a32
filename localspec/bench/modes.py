"""The modes a benchmark compares: localspec's own and the ecosystem's baselines.

localspec modes: `off`, `ngram[:K]`, `draft:K`, `hybrid[:K]`, `auto`. A speculative mode with
`+batch-ties` (`auto+batch-ties`) verifies greedy drafts in one batch instead of in exact-width
chunks (`localspec.speculative.ties`): what exactness costs, and what it changes, side by side.
With `+no-suffix` (`auto+no-suffix`) it drafts without suffix drafts
(`localspec.speculative.suffix`): what they add.
Baselines, run on the same prompt tokens and token budget:
  `lcp-lookup[:K]`  llama-cpp-python's `LlamaPromptLookupDecoding` (K drafted tokens, default
                    10, the library's own default) inside its high-level `Llama`;
  `server-off`, `server-draft[:K]`, `server-ngram-simple`, `server-ngram-mod`,
  `server-ngram-cache`, `server-spec-default`
                    llama.cpp's `llama-server` plain, with the draft model (`-md`, K = its
                    `--spec-draft-n-max`, default the server's own), with one of its n-gram
                    drafters (`--spec-type`), or with `--spec-default` (ngram-mod with
                    llama.cpp's recommended lengths).
`all` expands to the full grid; the default stays small because every mode costs a pass over
every prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from localspec.errors import UsageError
from localspec.speculative.engine import SpecMode, SpecSettings


class Kind(StrEnum):
    LOCALSPEC = "localspec"
    LCP_LOOKUP = "lcp-lookup"
    SERVER = "llama-server"


SERVER_SPECS = ("off", "draft", "ngram-simple", "ngram-mod", "ngram-cache", "spec-default")
DEFAULT_MODES = "off,ngram,draft:2,draft:4,hybrid,auto"
QUICK_MODES = "off,ngram,auto"
ALL_MODES = (
    "off,ngram,draft:1,draft:2,draft:3,draft:4,draft:6,draft:8,hybrid,auto,"
    "lcp-lookup:2,lcp-lookup:10,server-off,server-draft,server-ngram-simple,server-ngram-mod,"
    "server-ngram-cache,server-spec-default"
)
LCP_LOOKUP_DEFAULT_K = 10
BATCH_TIES = "+batch-ties"
NO_SUFFIX = "+no-suffix"
# a speculative mode's name may end in these, each turning one setting off
MODIFIERS = {BATCH_TIES: "redecode_ties", NO_SUFFIX: "suffix_drafts"}


@dataclass(frozen=True)
class Mode:
    """One column of the comparison. `spec` is set for localspec modes, `server_spec` (one of
    SERVER_SPECS) for llama-server ones; `k` is a draft length where the name gave one."""

    name: str
    kind: Kind
    spec: SpecSettings | None = None
    server_spec: str = ""
    k: int | None = None

    @property
    def uses_draft_model(self) -> bool:
        if self.spec is not None:
            return self.spec.uses_draft_model
        return self.server_spec == "draft"


def _k(name: str, text: str) -> int | None:
    if not text:
        return None
    try:
        k = int(text)
    except ValueError:
        raise UsageError(f"mode {name!r}: the draft length after ':' must be a number") from None
    if not 1 <= k <= 64:
        raise UsageError(f"mode {name!r}: the draft length must be between 1 and 64")
    return k


def parse_mode(name: str) -> Mode:
    for modifier, setting in MODIFIERS.items():
        if name.endswith(modifier):
            unmodified = parse_mode(name.removesuffix(modifier))
            spec = unmodified.spec
            if spec is None or spec.mode is SpecMode.OFF:
                raise UsageError(f"mode {name!r}: {modifier} is for localspec's speculative modes")
            turned_off: dict[str, Any] = {setting: False}
            return replace(unmodified, name=name, spec=replace(spec, **turned_off))
    base, _, k_text = name.partition(":")
    k = _k(name, k_text)
    if base == Kind.LCP_LOOKUP:
        return Mode(name, Kind.LCP_LOOKUP, k=k or LCP_LOOKUP_DEFAULT_K)
    if base.startswith("server-") and base.removeprefix("server-") in SERVER_SPECS:
        server_spec = base.removeprefix("server-")
        if k is not None and server_spec != "draft":
            raise UsageError(f"mode {name!r}: only server-draft takes a draft length")
        return Mode(name, Kind.SERVER, server_spec=server_spec, k=k)
    try:
        mode = SpecMode(base)
    except ValueError:
        raise UsageError(
            f"unknown mode {name!r}: use off, ngram[:K], draft:K, hybrid[:K], auto, "
            f"lcp-lookup[:K], server-off, server-draft[:K], server-ngram-simple, "
            f"server-ngram-mod, server-ngram-cache, server-spec-default or all; a speculative "
            f"localspec mode may end in "
            f"{' and '.join(MODIFIERS)}"
        ) from None
    if k is None:
        return Mode(name, Kind.LOCALSPEC, SpecSettings(mode=mode))
    if mode in (SpecMode.OFF, SpecMode.AUTO):
        raise UsageError(f"mode {name!r}: {base} takes no draft length")
    if mode is SpecMode.NGRAM:
        return Mode(name, Kind.LOCALSPEC, SpecSettings(mode=mode, ngram_draft_max=k), k=k)
    return Mode(name, Kind.LOCALSPEC, SpecSettings(mode=mode, draft_max=k), k=k)


def parse_modes(text: str) -> list[Mode]:
    """Comma-separated names in order, `all` expanded, repeats dropped; `off` is required
    because every ratio and every divergence check is against plain decoding."""
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        for each in ALL_MODES.split(",") if name == "all" else [name] if name else []:
            if each not in names:
                names.append(each)
    modes = [parse_mode(name) for name in names]
    if "off" not in names:
        raise UsageError("--modes must include off: ratios are relative to plain decoding")
    return modes


def draft_need(modes: list[Mode]) -> bool | None:
    """Whether the draft model must be there (True), is used if present (None: auto), or is
    not wanted (False), in the terms of `localspec.cli.options.model_files`."""
    if any(m.uses_draft_model for m in modes):
        return True
    if any(m.spec is not None and m.spec.mode is SpecMode.AUTO for m in modes):
        return None
    return False
