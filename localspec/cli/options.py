"""Turning the shared command-line options into settings and model files (see `arguments`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from localspec.cli.arguments import ALL_LAYERS, DEFAULT_CTX_SIZE
from localspec.cli.limit_args import constraint_limits
from localspec.cli.requested import model_entries
from localspec.errors import InvalidSettingsError, UsageError
from localspec.loading import RuntimeSettings, check_draft_ctx
from localspec.models import load_registry, pair_or_model
from localspec.models.pull import installed_path, pull
from localspec.models.registry import ModelEntry
from localspec.observe.guard import GuardSettings
from localspec.observe.history import default_history_path
from localspec.paths import PrivatePathError
from localspec.speculative.engine import SpecMode, SpecSettings
from localspec.speculative.sampling import SamplingSettings
from localspec.suffix_file import default_store_path
from localspec.wire_schema import SAMPLING

Number = TypeVar("Number", int, float)

# command-line option -> models.toml pair setting of the same meaning
_SPEC_OPTIONS = {
    "spec": "spec",
    "draft_max": "draft_max",
    "p_min": "p_min",
    "ngram_max": "ngram_draft_max",
    "ngram_min_match": "ngram_min_match",
    "redecode_ties": "redecode_ties",
    "suffix_drafts": "suffix_drafts",
    "max_draft_tokens": "max_draft_tokens",
    "max_draft_ms": "max_draft_ms",
}


def _pair_settings(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The registry settings of the pair `-m` chose (empty when --target/--draft replace it)."""
    if args.target or args.draft:
        return "", {}
    _target, _draft, pair = pair_or_model(args.model, load_registry())
    if pair is None:
        return "", {}
    unknown = set(pair.settings) - set(_SPEC_OPTIONS.values())
    if unknown:
        raise UsageError(
            f"models.toml pair {pair.name!r}: unknown setting(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(_SPEC_OPTIONS.values())}"
        )
    return pair.name, dict(pair.settings)


def spec_settings(args: argparse.Namespace) -> SpecSettings:
    """Speculation settings: options given on the command line, else the chosen pair's
    settings in models.toml (tuned per pair, e.g. longer drafts for GPU targets), else
    localspec's defaults."""
    pair, recommended = _pair_settings(args)
    try:
        _settings_from(recommended)  # a bad pair setting is reported as the pair's
    except (ValueError, TypeError, InvalidSettingsError) as exc:
        raise UsageError(f"models.toml pair {pair!r}: {exc}") from exc
    given = {key: getattr(args, option) for option, key in _SPEC_OPTIONS.items()}
    return _settings_from({**recommended, **{k: v for k, v in given.items() if v is not None}})


def _settings_from(chosen: dict[str, Any]) -> SpecSettings:
    """SpecSettings from option values by models.toml name, localspec's defaults elsewhere."""
    defaults = SpecSettings()
    return SpecSettings(
        mode=SpecMode(chosen.get("spec", SpecMode.AUTO.value)),
        draft_max=int(chosen.get("draft_max", defaults.draft_max)),
        p_min=None if chosen.get("p_min") is None else float(chosen["p_min"]),
        ngram_draft_max=int(chosen.get("ngram_draft_max", defaults.ngram_draft_max)),
        ngram_min_match=int(chosen.get("ngram_min_match", defaults.ngram_min_match)),
        redecode_ties=_flag("redecode_ties", chosen.get("redecode_ties", defaults.redecode_ties)),
        suffix_drafts=_flag("suffix_drafts", chosen.get("suffix_drafts", defaults.suffix_drafts)),
        max_draft_tokens=_optional(int, chosen.get("max_draft_tokens")),
        max_draft_ms=_optional(float, chosen.get("max_draft_ms")),
    )


def _optional(kind: Callable[[Any], Number], value: Any) -> Number | None:
    """A setting that may be unset (None), as the given kind (a models.toml value too)."""
    return None if value is None else kind(value)


def _flag(name: str, value: Any) -> bool:
    """A boolean setting; models.toml could hold anything, so refuse what is not a boolean."""
    if not isinstance(value, bool):
        raise InvalidSettingsError(f"{name} must be true or false, not {value!r}")
    return value


def sampling_settings(args: argparse.Namespace) -> SamplingSettings:
    """The sampling options, by the wire schema's argparse destinations; a field without an
    option (`samplers`, the penalties' window) keeps SamplingSettings' default."""
    return SamplingSettings(
        **{
            f.attribute: getattr(args, f.destination)
            for f in SAMPLING.fields
            if hasattr(args, f.destination)
        }
    )


def _local(entry: ModelEntry, offline: bool) -> Path:
    """The file for `entry`, fetched with visible progress on first use (never with --offline).

    Local paths are returned as they are: loading checks them and says what is wrong.
    """
    if entry.path is not None:
        return entry.path
    found = installed_path(entry)
    if found is not None:
        return found
    if not offline:
        print(f"localspec: {entry.name} is not downloaded yet; fetching it", file=sys.stderr)
    return pull(entry, offline=offline).path


def model_files(args: argparse.Namespace, need_draft: bool | None) -> tuple[Path, Path | None]:
    """Target and draft files for `-m/--target/--draft`.

    `need_draft`: True fetches the draft if missing, None (auto mode) uses the pair's draft only
    if it is already here (the tuner may never want it, so it is not worth a download) but
    fetches one named with --draft (never dropped), False skips it.
    """
    target, draft = model_entries(args)
    if need_draft and draft is None:
        raise UsageError(
            "this speculation mode needs a draft model: choose a pair with -m (see "
            "`localspec models`), pass --draft, or use --spec ngram"
        )
    target_path = _local(target, args.offline)
    if draft is None or need_draft is False:
        return target_path, None
    if need_draft is None and not args.draft:  # a draft the user named is fetched
        return target_path, draft.path or installed_path(draft)
    return target_path, _local(draft, args.offline)


def draft_need(spec: SpecSettings) -> bool | None:
    """What `model_files` should do about the draft for this speculation mode."""
    return None if spec.mode is SpecMode.AUTO else spec.uses_draft_model


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def runtime_settings(
    args: argparse.Namespace, need_draft: bool | None, ngram_cache: bool = True
) -> RuntimeSettings:
    """The models and load-time settings the options ask for; an option left out (None, see
    `arguments`) takes its default here."""
    n_ctx = _given(args.ctx_size, DEFAULT_CTX_SIZE)
    check_draft_ctx(args.draft_ctx_size, n_ctx)  # before a model is fetched
    mtp = bool(getattr(args, "mtp", False))
    if mtp and args.draft:
        raise UsageError("--mtp drafts with the target's own MTP layers: give no --draft with it")
    target, draft = model_files(args, False if mtp else need_draft)  # --mtp: a pair's is unused
    return RuntimeSettings(
        mtp=mtp,
        target=target,
        draft=draft,
        n_ctx=n_ctx,
        draft_n_ctx=args.draft_ctx_size,
        n_threads=args.threads,
        target_gpu_layers=_given(args.gpu_layers, ALL_LAYERS),
        draft_gpu_layers=_given(args.draft_gpu_layers, ALL_LAYERS),
        use_mmap=bool(args.mmap),
        ngram_cache=ngram_cache,
        flash_attn=_given(args.flash_attn, "auto"),
        cache_type_v=_given(args.cache_type_v, "f16"),
        ubatch=getattr(args, "ubatch_size", None),
        constraint_limits=constraint_limits(args),
    )


def watched(settings: RuntimeSettings, args: argparse.Namespace) -> RuntimeSettings:
    """`settings` with the guard, the history file and the suffix store's file that
    `--no-guard`, `--no-history` and `--no-suffix-store` leave on (the commands users run;
    benchmarks have none of them: their modes would learn from each other)."""
    return replace(
        settings,
        guard=GuardSettings() if getattr(args, "guard", True) else None,
        history=None if args.no_history else default_history_path(),
        suffix_store=None if args.no_suffix_store else _suffix_store(settings.target),
    )


def _suffix_store(target: Path) -> Path | None:
    """The suffix store's file; where its folder cannot be made, the store lives in memory
    (it is a cache: the command goes on, and one line says why)."""
    try:
        return default_store_path(target)
    except PrivatePathError as exc:
        print(f"localspec: {exc}; the suffix store is kept in memory only", file=sys.stderr)
        return None
