"""`localspec serve`: the local HTTP server editors and OpenAI clients talk to.

Layers: `worker` runs generations on one thread; `body` checks a request body's size,
nesting and text; `openai_api` and `llamacpp_api` translate wire formats (read with `wire`)
to `GenerationRequest`s and answer through `jobs.respond`; `security` keeps other users and
web pages out; `app` wires routes and errors; `listen` owns sockets and the process's
lifetime.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localspec.llama.pieces import PROMPT_HOLD_S
from localspec.runtime import Runtime
from localspec.server.app import build_app
from localspec.server.body import BODY_TIMEOUT_S, default_max_body
from localspec.server.jobs import ServerState
from localspec.server.listen import api_token, claim_socket_path, run, tcp_listener, unix_listener
from localspec.server.metrics import ServerMetrics
from localspec.server.record import Recorder
from localspec.server.wire import RequestDefaults
from localspec.server.worker import GenerationWorker
from localspec.speculative.engine import SpecMode
from localspec.speculative.textstream import StopLimits


@dataclass(frozen=True)
class ServeSettings:
    """Where to listen, who may connect, and what requests get for fields they leave out."""

    socket_path: Path | None  # None: no Unix socket (TCP only)
    host: str = "127.0.0.1"
    port: int | None = None
    auth: bool = True
    max_waiting: int = 4
    parallel: int = 1  # slots (`localspec.server.slots`); `serve`'s default is DEFAULT_PARALLEL
    prompt_hold: float = PROMPT_HOLD_S  # `--prompt-hold` (`localspec.llama.pieces.PromptHold`)
    defaults: RequestDefaults = field(default_factory=RequestDefaults)
    max_body: int | None = None  # None: default_max_body(n_ctx)
    stop_limits: StopLimits = field(default_factory=StopLimits)
    aliases: tuple[str, ...] = ()
    strict_model_names: bool = False
    record: Path | None = None  # append generation requests' bodies here (`--record`)
    metrics: bool = False  # `GET /metrics` (`--metrics`; off by default, as llama-server's)
    keep_client_headers: bool = False  # `--keep-client-headers` (`server.client_lines`)
    body_timeout_s: float | None = BODY_TIMEOUT_S  # `--body-timeout` (None: no limit)


def serve(
    settings: ServeSettings,
    model_id: str,
    load_runtime: Callable[[], Runtime],
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> None:
    """Load the models, listen, serve until SIGINT/SIGTERM, remove the socket."""
    if settings.socket_path is None and settings.port is None:
        raise ValueError("serve needs a socket path or a port")
    if settings.socket_path is not None:
        claim_socket_path(settings.socket_path)  # fail before a long model load
    token = api_token() if settings.port is not None and settings.auth else None
    # a file that cannot be recorded to is refused before the load
    recording = Recorder(settings.record) if settings.record else contextlib.nullcontext(None)
    with recording as recorder, load_runtime() as runtime:
        worker = GenerationWorker(
            runtime, settings.max_waiting, settings.parallel, settings.prompt_hold
        )
        metrics = None
        if settings.metrics:
            metrics = ServerMetrics(lambda: (worker.processing, worker.waiting))
            metrics.attach(runtime.watch)
        max_body = settings.max_body or default_max_body(runtime.n_ctx)
        state = ServerState(
            runtime,
            worker,
            model_id,
            settings.defaults,
            max_body,
            settings.stop_limits,
            aliases=settings.aliases,
            strict_model_names=settings.strict_model_names,
            announce=announce,
            metrics=metrics,
            keep_client_headers=settings.keep_client_headers,
            body_timeout_s=settings.body_timeout_s,
        )
        extra_hosts = () if settings.host in ("127.0.0.1", "::1", "localhost") else (settings.host,)
        listeners = []
        with contextlib.ExitStack() as cleanup:
            if recorder is not None:
                recorder.max_body = max_body
                announce(f"localspec: recording generation requests to {settings.record}")
            app = build_app(state, token=token, extra_hosts=extra_hosts, recorder=recorder)
            if settings.socket_path is not None:
                listeners.append(unix_listener(settings.socket_path))
                cleanup.callback(settings.socket_path.unlink, missing_ok=True)
                announce(f"localspec: serving {model_id} on unix:{settings.socket_path}")
            if settings.port is not None:
                tcp = tcp_listener(settings.host, settings.port)
                listeners.append(tcp)
                host, port = tcp.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                auth = "bearer token required" if token else "no auth"
                announce(f"localspec: serving {model_id} on http://{shown}:{port} ({auth})")
            for listener in listeners:
                cleanup.callback(listener.close)
            # auto mode measures this machine once (cached); do it before the first request
            auto = settings.defaults.spec.mode is SpecMode.AUTO
            worker.start(runtime.hardware_profile if auto else None)
            cleanup.callback(worker.stop)
            run(app, listeners, worker.cancel_all)
    announce("localspec: server stopped")
