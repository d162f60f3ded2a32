"""`localspec serve`: a warm model behind a Unix socket (default) and, on request, TCP."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localspec.cli.complete import notice
from localspec.cli.options import draft_need, runtime_settings, spec_settings
from localspec.models import load_registry
from localspec.paths import default_socket_path, token_path
from localspec.runtime import Runtime
from localspec.server import ServeSettings, serve
from localspec.server.listen import api_token


def model_id(args: argparse.Namespace) -> str:
    """The name clients see in /v1/models: the pair or model asked for, else the default."""
    if args.target:
        return Path(args.target).stem
    return str(args.model or load_registry().default_pair)


def serve_command(args: argparse.Namespace) -> int:
    if args.show_token:
        token = api_token()
        print(token)
        print(f"(stored in {token_path()})", file=sys.stderr)
        return 0
    if args.host != "127.0.0.1" and args.port is None:
        print("localspec: error: --host needs --port", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        notice(
            f"warning: listening on {args.host} makes the server reachable from other "
            f"machines; anyone with the token can use it"
        )
    spec = spec_settings(args)
    settings = ServeSettings(
        socket_path=None if args.no_socket else (args.socket or default_socket_path()),
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        max_waiting=args.queue,
        spec=spec,
    )
    runtime = runtime_settings(args, draft_need(spec))
    serve(settings, model_id(args), lambda: Runtime(runtime, notice))
    return 0
