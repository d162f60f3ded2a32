"""llama.cpp's `llama-server` as a baseline: the speculation the wider ecosystem ships.

Each `server-*` mode is its own server process (speculation is chosen at start-up), on a free
loopback port with the same model files, context size and threads as localspec. Requests go to
`/completion` with the very prompt token ids localspec decodes, greedy, without prompt caching;
speed and acceptance come from the server's own `timings`. What the binary supports is read
from its `--help`, so a build without a mode is reported as skipped with that reason.
"""

from __future__ import annotations

import functools
import subprocess
import urllib.error
from pathlib import Path

from localspec.bench import memory
from localspec.bench.contender import ContenderError, Measured, Prompt, Skipped
from localspec.bench.modes import Mode
from localspec.bench.server_process import ServerProcess, free_port
from localspec.loading import RuntimeSettings

STOP_TIMEOUT_S = 10.0
"""How long a terminated llama-server may take to exit before it is killed."""


@functools.cache
def read_help(binary: Path) -> str:
    """`llama-server --help`, or raises OSError/subprocess errors when it cannot run: what a
    build supports is read from it (once per binary; the benches ask for each mode)."""
    result = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout + result.stderr


def _layers(count: int, help_text: str) -> str:
    """localspec's -1 ("all layers") in the server's terms."""
    if count >= 0:
        return str(count)
    return "all" if "'all'" in help_text else "999"


def server_command(
    mode: Mode, binary: Path, settings: RuntimeSettings, *, threads: int, help_text: str, port: int
) -> list[str] | str:
    """The command line for `mode`, or why this build or this setup cannot run it."""
    command = [
        str(binary),
        "-m", str(settings.target),
        "-c", str(settings.n_ctx),
        "-t", str(threads),
        "-tb", str(threads),
        "-ngl", _layers(settings.target_gpu_layers, help_text),
        "-np", "1",
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    if not settings.use_mmap:  # localspec's default: load weights, do not map them
        if "--load-mode" in help_text:
            command += ["--load-mode", "none"]
        elif "--no-mmap" in help_text:
            command.append("--no-mmap")
    if "--no-webui" in help_text:
        command.append("--no-webui")
    if settings.flash_attn != "auto" and "--flash-attn" in help_text:
        # as given to both; localspec's "auto" (off on a CPU) leaves llama-server its default
        command += ["--flash-attn", settings.flash_attn]
    spec = mode.server_spec
    if spec == "draft":
        if settings.draft is None:
            return "no draft model: choose a pair with -m or pass --draft"
        command += ["-md", str(settings.draft)]
        command += ["-ngld", _layers(settings.draft_gpu_layers, help_text)]
        if settings.draft_n_ctx is not None:
            command += ["-cd", str(settings.draft_n_ctx)]
        if "draft-simple" in help_text:
            command += ["--spec-type", "draft-simple"]
        if mode.k is not None:
            flag = "--spec-draft-n-max" if "--spec-draft-n-max" in help_text else "--draft-max"
            command += [flag, str(mode.k)]
    elif spec == "spec-default":
        if "--spec-default" not in help_text:
            return "this llama-server has no --spec-default"
        command.append("--spec-default")
    elif spec != "off":
        if "--spec-type" not in help_text or spec not in help_text:
            return f"this llama-server has no --spec-type {spec}"
        command += ["--spec-type", spec]
    return command


class LlamaServer:
    """One running llama-server process serving one mode."""

    in_process = False
    constrains = False

    def __init__(self, mode: Mode, server: ServerProcess) -> None:
        self.mode = mode
        self._server = server

    def run(self, prompt: Prompt, max_tokens: int) -> Measured:
        body = {
            "prompt": prompt.tokens,
            "n_predict": max_tokens,
            "temperature": 0.0,
            "cache_prompt": False,
            "return_tokens": True,
        }
        try:
            reply = self._server.request_json("/completion", body)
            tokens = [int(t) for t in reply["tokens"]]
            timings = reply["timings"]
            speed = float(timings["predicted_per_second"])
        except urllib.error.HTTPError as exc:
            raise ContenderError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ContenderError(f"{exc!r}; server log: {self._server.log_tail()}") from exc
        drafted = int(timings.get("draft_n", 0))
        accepted = int(timings.get("draft_n_accepted", 0))
        return Measured(
            tokens=tokens,
            tokens_per_second=speed,
            drafted=drafted,
            accepted=accepted,
            target_steps=max(len(tokens) - accepted, 0),
            details={"timings": timings, "stop_type": reply.get("stop_type")},
            peak_rss_bytes=memory.child_peak_bytes(self._server.pid),
        )

    def close(self) -> None:
        self._server.close()


def open_server(
    mode: Mode, binary: Path | None, settings: RuntimeSettings, threads: int
) -> LlamaServer | Skipped:
    """Start and wait for a server for `mode`, or say why it cannot be measured."""
    if binary is None:
        return Skipped(
            mode.name,
            "llama-server is not on PATH: build llama.cpp's server and put it on PATH "
            "or pass --llama-server PATH",
        )
    try:
        help_text = read_help(binary)
    except (OSError, subprocess.SubprocessError) as exc:
        return Skipped(mode.name, f"cannot run {binary} --help: {exc}")
    port = free_port()
    command = server_command(
        mode, binary, settings, threads=threads, help_text=help_text, port=port
    )
    if isinstance(command, str):
        return Skipped(mode.name, command)
    server = ServerProcess("llama-server", command, port, stop_timeout_s=STOP_TIMEOUT_S)
    problem = server.wait_ready()
    if problem is not None:
        server.close()
        return Skipped(mode.name, problem)
    return LlamaServer(mode, server)
