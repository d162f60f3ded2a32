"""Whether `complete` may use a running server, or must load the models itself.

A server's models and load-time settings are fixed when it starts. An option the user gave
that the server does not match (another model, another `--ctx-size`, a `--threads` it does not
report) cannot be honoured there. Without `--server`, the models then load in this process,
with a one-line notice saying why; with `--server`, the command is refused. Options left at
their defaults, and per-request options (sampling, speculation, `--stop`), never conflict.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from localspec.client import (
    ServedModel,
    ServerAddress,
    ServerClient,
    default_server,
    parse_address,
)
from localspec.errors import UsageError

PROBE_TIMEOUT_S = 5.0  # /v1/models answers at once, even while the server generates

# load-time option -> (argparse destination, the server's `meta` key: RuntimeSettings' name)
LOAD_OPTIONS = {
    "--ctx-size": ("ctx_size", "n_ctx"),
    "--threads": ("threads", "n_threads"),
    "--gpu-layers": ("gpu_layers", "target_gpu_layers"),
    "--draft-gpu-layers": ("draft_gpu_layers", "draft_gpu_layers"),
    "--mmap": ("mmap", "use_mmap"),
}


@dataclass(frozen=True)
class Conflict:
    """One option the server cannot honour: what was asked, and what the server runs."""

    asked: str  # "--ctx-size 8192"
    served: str  # "runs with --ctx-size 4096"


def choose_server(args: argparse.Namespace, notice: Callable[[str], None]) -> ServerAddress | None:
    """--server (refused if it cannot honour the options), else the server on the default
    socket if it can honour them, else None: load the models here."""
    if args.no_server:
        return None
    forced = args.server is not None
    address = parse_address(args.server) if forced else default_server()
    if address is None or not _constrained(args):
        return address
    served = ServerClient(address, timeout=PROBE_TIMEOUT_S).served_model()
    conflicts = model_conflicts(args, served) + load_conflicts(args, served.meta)
    if not conflicts:
        return address
    runs = " and ".join(c.served for c in conflicts)
    asked = ", ".join(c.asked for c in conflicts)
    if forced:
        them = "it" if len(conflicts) == 1 else "them"
        raise UsageError(
            f"the server at {address} {runs}, so {asked} cannot apply there: leave {them} out, "
            f"restart the server with {them}, or pass --no-server"
        )
    notice(f"the server at {address} {runs}; loading the models in-process for {asked}")
    return None


def _constrained(args: argparse.Namespace) -> bool:
    """Whether the user gave an option a server must match (else any server will do)."""
    models = (args.model, args.target, args.draft)
    loading = (getattr(args, dest) for dest, _key in LOAD_OPTIONS.values())
    return any(value is not None for value in (*models, *loading))


def model_conflicts(args: argparse.Namespace, served: ServedModel) -> list[Conflict]:
    """The asked-for target (and draft, if one is asked for) against the served files."""
    if not (args.model or args.target or args.draft):
        return []  # no model named: the server's models are the ones wanted
    from localspec.cli.requested import file_name, model_entries  # noqa: PLC0415  (registry)

    target, draft = model_entries(args)
    conflicts = []
    wanted = [("target", file_name(target))]
    if draft is not None:
        wanted.append(("draft", file_name(draft)))
    for role, name in wanted:
        if role not in served.meta:
            conflicts.append(Conflict(f"{role} {name}", f"does not report its {role} model"))
        elif served.meta[role] != name:
            runs = served.meta[role] or "none"
            conflicts.append(Conflict(f"{role} {name}", f"runs {role} {runs}"))
    return conflicts


def load_conflicts(args: argparse.Namespace, meta: Mapping[str, Any]) -> list[Conflict]:
    """Each load-time option the user gave that the server's settings differ from (or that
    the server does not report, so it cannot be known to match)."""
    conflicts = []
    for flag, (dest, key) in LOAD_OPTIONS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if key not in meta:
            conflicts.append(Conflict(_shown(flag, value), f"does not report its {flag}"))
        elif meta[key] != value:
            conflicts.append(Conflict(_shown(flag, value), f"runs with {_shown(flag, meta[key])}"))
    return conflicts


def _shown(flag: str, value: Any) -> str:
    """An option as it is typed: `--ctx-size 4096`, `--mmap`; a flag that is off: `no --mmap`."""
    if isinstance(value, bool):
        return flag if value else f"no {flag}"
    return f"{flag} {value}"
