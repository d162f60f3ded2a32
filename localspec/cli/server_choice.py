"""Whether `complete` and `chat` may use a running server, or must load the models here.

A server's models and load-time settings are fixed when it starts. An option the user gave
that the server does not match (another model, another `--ctx-size`, a `--threads` it does not
report) cannot be honoured there. Without `--server`, the models then load in this process,
with a one-line notice saying why; with `--server`, the command is refused. Options left at
their defaults, and per-request options (sampling, speculation, `--stop`), never conflict.
A server is asked what it runs only when an option needs matching (`/v1/models` answers at
once), through `localspec.remote`, which knows how each kind of server says it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

from localspec.client import default_server, parse_address
from localspec.errors import UsageError
from localspec.remote import (
    RemoteServer,
    RemoteSettings,
    Requirement,
    ServerKind,
    mismatch_error,
)

# load-time option -> (argparse destination, the server's `meta` key: RuntimeSettings' name)
LOAD_OPTIONS = {
    "--ctx-size": ("ctx_size", "n_ctx"),
    "--draft-ctx-size": ("draft_ctx_size", "draft_n_ctx"),
    "--threads": ("threads", "n_threads"),
    "--gpu-layers": ("gpu_layers", "target_gpu_layers"),
    "--draft-gpu-layers": ("draft_gpu_layers", "draft_gpu_layers"),
    "--mmap": ("mmap", "use_mmap"),
    "--flash-attn": ("flash_attn", "flash_attn"),
    "--cache-type-v": ("cache_type_v", "cache_type_v"),
    "--ubatch-size": ("ubatch_size", "ubatch"),
    "--mtp": ("mtp", "mtp"),
}


def loads_here(args: argparse.Namespace, notice: Callable[[str], None]) -> bool:
    """Whether an option only the models loaded here can honour was given (`--no-history`,
    `--no-guard`, `--no-suffix-store`: a server keeps its own); with `--server` it is refused."""
    given = [name for name, on in _LOCAL_ONLY.items() if getattr(args, on[0], on[1]) != on[1]]
    if not given:
        return False
    names = " and ".join(given)
    if args.server is not None:
        raise UsageError(
            f"{names}: for models loaded here; a server keeps its own history, guard and "
            f"suffix store (start it with `localspec serve {' '.join(given)}`), or leave "
            f"--server out"
        )
    if default_server() is not None:
        notice(f"{names}: the models load here (a server keeps its own history, guard and store)")
    return True


# options only the models loaded here honour -> (argparse destination, its default)
_LOCAL_ONLY = {
    "--no-history": ("no_history", False),
    "--no-guard": ("guard", True),
    "--no-suffix-store": ("no_suffix_store", False),
}


def choose_server(args: argparse.Namespace, notice: Callable[[str], None]) -> RemoteServer | None:
    """--server (refused if it cannot honour the options), else the server on the default
    socket if it can honour them, else None: load the models here."""
    if args.no_server or loads_here(args, notice):
        return None
    forced = args.server is not None
    settings = server_settings(args) if forced else None
    if settings is None:
        address = default_server()
        if address is None:
            return None
        settings = RemoteSettings(address, ServerKind.LOCALSPEC, requires=requirements(args))
    server = RemoteServer(settings)
    if not settings.requires:
        return server
    conflicts = server.conflicts()
    if not conflicts:
        return server
    if forced:
        raise mismatch_error(settings.address, conflicts)
    runs = " and ".join(c.served for c in conflicts)
    asked = ", ".join(c.asked for c in conflicts)
    notice(f"the server at {settings.address} {runs}; loading the models in-process for {asked}")
    return None


def server_settings(args: argparse.Namespace, window: int | None = None) -> RemoteSettings:
    """The server --server names, as --api-key and --server-kind describe it; `window`: the
    context window of a server that does not report one."""
    kind = getattr(args, "server_kind", None)
    return RemoteSettings(
        parse_address(args.server, getattr(args, "api_key", None)),
        None if kind in (None, "auto") else ServerKind(kind),
        window,
        requirements(args),
    )


def requirements(args: argparse.Namespace) -> tuple[Requirement, ...]:
    """What the options ask of a server: the models named (none named: the server's models
    are the ones wanted), and each load-time option given (left out: any value will do)."""
    return (*model_requirements(args), *load_requirements(args))


def model_requirements(args: argparse.Namespace) -> list[Requirement]:
    """The asked-for target (and draft, if one is asked for) by file name."""
    if not (args.model or args.target or args.draft):
        return []
    from localspec.cli.requested import file_name, model_entries  # noqa: PLC0415  (registry)

    target, draft = model_entries(args)
    wanted = [("target", file_name(target))]
    if draft is not None:
        wanted.append(("draft", file_name(draft)))
    return [
        Requirement(
            role,
            name,
            f"{role} {name}",
            f"does not report its {role} model",
            _runs(f"{role} {{}}", lambda name: str(name or "none")),
        )
        for role, name in wanted
    ]


def load_requirements(args: argparse.Namespace) -> list[Requirement]:
    return [
        Requirement(
            key,
            getattr(args, dest),
            _shown(flag, getattr(args, dest)),
            f"does not report its {flag}",
            _runs("with {}", partial(_shown, flag)),
        )
        for flag, (dest, key) in LOAD_OPTIONS.items()
        if getattr(args, dest) is not None
    ]


def _runs(form: str, show: Callable[[Any], str]) -> Callable[[Any], str]:
    """How to say what a server runs instead: "runs " and `form` with the value shown."""
    return lambda value: "runs " + form.format(show(value))


def _shown(flag: str, value: Any) -> str:
    """An option as it is typed: `--ctx-size 4096`, `--mmap`; a flag that is off: `no --mmap`."""
    if isinstance(value, bool):
        return flag if value else f"no {flag}"
    return f"{flag} {value}"
