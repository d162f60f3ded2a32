"""`localspec serve`: a warm model behind a Unix socket (default) and, on request, TCP.

Every option either takes effect or is refused before the models load: the generation
options (`--max-tokens`, sampling, `--stop`, `--ignore-eos`, speculation) become the defaults
of requests that leave those fields out, as llama-server's do, and `/props` shows them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from localspec.cli.limit_args import stop_limits
from localspec.cli.notice import notice
from localspec.cli.options import (
    draft_need,
    runtime_settings,
    sampling_settings,
    spec_settings,
    watched,
)
from localspec.errors import UsageError
from localspec.gpu import gpu_notice_once
from localspec.llama.pieces import PROMPT_HOLD_S
from localspec.models import load_registry
from localspec.paths import default_socket_path, token_path
from localspec.runtime import Runtime
from localspec.server import ServeSettings, serve
from localspec.server.listen import api_token
from localspec.server.wire import RequestDefaults

_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_MAX_PORT = 65535


def model_id(args: argparse.Namespace) -> str:
    """The name clients see in /v1/models: the pair or model asked for, else the default."""
    if args.target:
        return Path(args.target).stem
    return str(args.model or load_registry().default_pair)


def check_listening(args: argparse.Namespace) -> None:
    """Refuse listening options that contradict each other or could not take effect."""
    if args.port is None:
        if args.no_socket:
            raise UsageError("--no-socket needs --port: the server would listen nowhere")
        if args.host != "127.0.0.1":
            raise UsageError("--host needs --port")
        if args.no_auth:
            raise UsageError(
                "--no-auth applies to TCP and needs --port (the Unix socket is private by its "
                "file mode)"
            )
    elif not 0 <= args.port <= _MAX_PORT:
        raise UsageError(f"--port must be between 0 and {_MAX_PORT} (0: any free port)")
    if args.no_socket and args.socket:
        raise UsageError("--socket and --no-socket contradict each other: give one")
    if args.prompt_hold is not None and args.parallel < 2:
        raise UsageError(
            "--prompt-hold needs --parallel 2 or more: with one slot requests run in arrival "
            "order and nothing stops a prompt"
        )


def request_defaults(args: argparse.Namespace) -> RequestDefaults:
    """The generation options as defaults for requests (checked now: a bad value is refused
    at startup, not on every request)."""
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    return RequestDefaults(
        max_tokens=args.max_tokens,
        sampling=sampling_settings(args),
        stop=tuple(stop for stop in args.stop if stop),
        ignore_eos=args.ignore_eos,
        spec=spec_settings(args),
    )


def serve_command(args: argparse.Namespace) -> int:
    if args.show_token:
        token = api_token()
        print(token)
        print(f"(stored in {token_path()})", file=sys.stderr)
        return 0
    check_listening(args)
    defaults = request_defaults(args)
    if args.host not in _LOOPBACK:
        notice(
            f"warning: listening on {args.host} makes the server reachable from other "
            f"machines; anyone with the token can use it"
        )
    settings = ServeSettings(
        socket_path=None if args.no_socket else (args.socket or default_socket_path()),
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        max_waiting=args.queue,
        parallel=args.parallel,
        prompt_hold=PROMPT_HOLD_S if args.prompt_hold is None else args.prompt_hold,
        max_body=args.max_body,
        stop_limits=stop_limits(args),
        defaults=defaults,
        aliases=tuple(dict.fromkeys(name for name in args.model_alias if name)),
        strict_model_names=args.strict_model_names,
        record=args.record,
        metrics=args.metrics,
        body_timeout_s=args.body_timeout or None,
        keep_client_headers=args.keep_client_headers,
    )
    # a draft named on the command line is loaded whatever the default mode: a request may
    # ask for draft speculation (`"spec": "draft"`) even where the server's default is not
    need_draft = True if args.draft else draft_need(defaults.spec)
    runtime = dataclasses.replace(
        runtime_settings(args, need_draft),
        cache_reuse=args.cache_reuse,
        cache_ram_mib=args.cache_ram,
        cache_disk_mib=args.cache_disk,
        cache_disk_min_tokens=args.cache_disk_min,
    )
    runtime = watched(runtime, args)
    gpu_notice_once(notice)
    serve(settings, model_id(args), lambda: Runtime(runtime, notice))
    return 0
