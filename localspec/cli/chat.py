"""`localspec chat`: resolve the models like the other commands, then run the Textual app.

Files are found (or fetched, with progress on stderr) before the app starts; loading them
happens inside the app, so the terminal shows a loading indicator instead of freezing. The app
is imported only here: `localspec` itself never depends on the TUI.

Every option `chat` accepts reaches the app: the models and hardware options the runtime, the
sampling, speculation, stop and --ignore-eos options each answer, --verbose the log (a file
while the app owns the terminal). Each conversation keeps its own --system, --spec,
--draft-max, --temperature, --top-p and --max-tokens: the options are the settings of new
conversations, and with --conversation N those typed on the command line replace N's saved
settings (and are saved as N's); the ones not typed leave N's as they were.

Like `complete`, chat uses a running `localspec serve` on the default socket when it can
honour the options (else it says why, and loads the models here); `--server` names a server
(localspec's, llama-server, any OpenAI-compatible endpoint), `--no-server` loads here. With
a server nothing is fetched or loaded in this process: the app connects to it instead, and
says in the app when it cannot (an address that does not answer, a refused API key).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from localspec.cli.arguments import DEFAULT_CTX_SIZE, given
from localspec.cli.notice import notice
from localspec.cli.options import (
    draft_need,
    runtime_settings,
    sampling_settings,
    spec_settings,
    watched,
)
from localspec.cli.server_choice import choose_server, loads_here, server_settings
from localspec.errors import UsageError
from localspec.gpu import gpu_notice_once
from localspec.loading import RuntimeSettings
from localspec.models import load_registry, short_name
from localspec.remote import RemoteSettings
from localspec.speculative.settings import SpecSettings

if TYPE_CHECKING:
    from tui.settings import Launch

# command-line option -> the per-conversation setting (`ChatSettings` field) it sets
_CONVERSATION_OPTIONS = {
    "system": "system",
    "spec": "spec_mode",
    "draft_max": "draft_max",
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
}


def launch_settings(args: argparse.Namespace) -> Launch:
    """What the app starts with, from the command line (files fetched when missing)."""
    from tui.settings import ChatSettings, Launch  # noqa: PLC0415  (the TUI's import cost)

    spec = spec_settings(args)
    sampling = sampling_settings(args)
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    defaults = ChatSettings(
        system=args.system or "",
        spec_mode=spec.mode,
        draft_max=spec.draft_max,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=args.max_tokens,
    )
    server = chat_server(args)
    return Launch(
        runtime=_local(args, spec) if server is None else _asked(args),
        model_label=_model_label(args) if server is None else "server",
        defaults=defaults,
        sampling=sampling,
        spec=spec,
        stop=tuple(args.stop),
        ignore_eos=args.ignore_eos,
        conversation=args.conversation,
        offline=args.offline,
        given=_typed_settings(args),
        server=server,
    )


def chat_server(args: argparse.Namespace) -> RemoteSettings | None:
    """--server's (checked when the app connects), else the local server if it can honour
    the options, else None: the models load here. `--ctx-size` is also the window of a
    server that does not report one."""
    if args.no_server or loads_here(args, notice):
        return None
    if args.server is not None:
        return server_settings(args, window=args.ctx_size)
    server = choose_server(args, notice)
    return None if server is None else server.settings


def _local(args: argparse.Namespace, spec: SpecSettings) -> RuntimeSettings:
    """The models to load here, watched as `--no-guard` and `--no-history` say."""
    return watched(runtime_settings(args, draft_need(spec)), args)


def _asked(args: argparse.Namespace) -> RuntimeSettings:
    """What the options ask for, without fetching anything (a server runs the models)."""
    target = args.target or args.model or load_registry().default_pair
    return RuntimeSettings(target=Path(target), n_ctx=args.ctx_size or DEFAULT_CTX_SIZE)


def _model_label(args: argparse.Namespace) -> str:
    """The status bar's name for the target: `--target` wins over `-m`, as in loading."""
    registry = load_registry()
    return short_name(args.target or args.model or registry.default_pair, registry)


def _typed_settings(args: argparse.Namespace) -> frozenset[str]:
    """The conversation settings whose options were typed (whatever their values)."""
    typed = given(args) | ({"system"} if args.system is not None else set())
    return frozenset(field for option, field in _CONVERSATION_OPTIONS.items() if option in typed)


def run(args: argparse.Namespace) -> int:
    from tui.app import ChatApp  # noqa: PLC0415  (the TUI's import cost is chat's alone)
    from tui.failures import divert_logging, log_file  # noqa: PLC0415
    from tui.store import ChatStore  # noqa: PLC0415

    # opened before the app takes the screen, so a folder made private is said on stderr
    app = ChatApp(launch_settings(args), store=ChatStore(notice=notice))
    gpu_notice_once(notice)  # before the app takes the screen: seen again when it exits
    with divert_logging(log_file()):
        app.run()
    # Textual has printed a crash's traceback itself; the exit status says it happened
    return app.return_code or 0
