"""`localspec bench editor`: llama.vim's requests replayed against localspec and llama-server.

Both contenders are server processes on loopback TCP with the same model files, context and
threads: `localspec serve`, and llama-server `--cache-reuse 256` (the command llama.vscode
recommends) when one is given or on PATH. The same request list (`editor_session`) goes to
each, the contenders taking turns per request and alternating who goes first: each server
keeps its own KV cache, so the turns change nothing in what either reuses, while the load
of a shared machine (other processes, the memory bus, thermal state) falls on both alike
instead of on whichever ran second.

What the bench changes in llama.vim's bodies, and why:
- `samplers` is dropped and `temperature` 0 and `seed` 0 are sent: llama.vim's chain (top_k,
  top_p, infill, no temperature stage) samples at temperature 1 on llama-server, so two runs
  would not even answer alike; greedy, both answer the same (up to numerics) and the answers
  can be compared.
- `response_fields` is dropped: the bench reads the timings of the warm-ups too, which
  llama.vim asks nothing of. Neither changes the work a server does.
- `t_max_prompt_ms` is dropped unless `--t-max-prompt-ms`: llama-server ignores it (llama.vim
  marks it as not yet supported) while localspec stops prompt processing at it, so with it the
  two do different work. The headline comparison is equal work; with the flag the replay uses
  llama.vim's values (500 ms on completions, 1 ms on warm-ups) and counts the answers cut short
  (localspec goes on with a cut prompt while idle, which then overlaps llama-server's turns).
- llama-server gets `-b` half the context: its /infill keeps at most 3/4 of a batch of prefix
  and 1/4 of suffix tokens (localspec never cuts them), and llama.vim's 256 lines of prefix can
  exceed the default batch's 1536. The report shows both servers' prompt sizes: localspec
  builds llama-server's /infill tokens (`localspec.fim`), so they are equal, but for a
  warm-up's last token, which localspec leaves for the next request to process.

`t_max_predict_ms` stays as llama.vim sends it (250 ms on a first request, 1000 ms on the
speculative one): past it, both servers end the answer at its next line break, so answers
depend on speed and the report's count of equal answers is a check, not a requirement.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec.bench.contender import Skipped
from localspec.bench.llama_server import read_help, server_command
from localspec.bench.llama_vim import EditorRequest
from localspec.bench.modes import parse_mode
from localspec.bench.server_process import ServerProcess, failure_text, free_port
from localspec.errors import BenchServerError, LocalspecError
from localspec.fim import ExtraChunk
from localspec.llama.params import default_threads
from localspec.loading import RuntimeSettings
from localspec.paths import open_private
from localspec.runtime import Runtime

LOCALSPEC = "localspec"
LLAMA_SERVER = "llama-server"
CACHE_REUSE = 256
_MAIN = "import sys; from localspec.cli import main; sys.exit(main())"


@dataclass(frozen=True)
class EditorOptions:
    spec: str = "auto"  # localspec serve's --spec
    t_max_prompt: bool = False  # replay llama.vim's t_max_prompt_ms
    llama_server: Path | None = None
    llama_slots: int = 1  # llama-server's -np (the concurrency bench serves requests at once)
    parallel: int | None = None  # localspec serve's --parallel, passed only when given
    # another localspec serve, with this --ubatch-size, as a contender of its own
    compare_ubatch: int | None = None
    # another localspec serve, with this --prompt-hold, as a contender of its own
    compare_prompt_hold: float | None = None
    # localspec serve keeps its history (the data folder's, as `serve` does) and serves
    # /metrics, whose last scrape goes to this file; None: no history, no metrics
    watch: Path | None = None


@dataclass(frozen=True)
class Reply:
    """One contender's answer to one request, as the bench measured and read it."""

    seconds: float
    prompt_n: int  # prompt tokens processed (timings.prompt_n)
    cache_n: int  # prompt tokens reused (timings.cache_n)
    content: str
    cut: bool  # prompt processing stopped at t_max_prompt_ms
    # where the round trip went, as the server reports it (timings), and its drafts
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_accepted: int = 0


@dataclass
class EditorResult:
    requests: list[EditorRequest]
    replies: dict[str, list[Reply]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    # prompt tokens a server processed while idle, in no reply's timings (localspec goes on
    # with a prompt t_max_prompt_ms cut short: `/health`'s idle_prompt_tokens)
    idle_tokens: dict[str, int] = field(default_factory=dict)


def localspec_command(
    settings: RuntimeSettings,
    spec: str,
    threads: int,
    port: int,
    *,
    parallel: int | None = None,
    watch: bool = False,
    prompt_hold: float | None = None,
) -> list[str]:
    """`localspec serve` as the benches run it: the mode asked for, never the guard's plain
    decoding instead; no history (a benchmark is not the user's work) unless `watch`, which
    also serves /metrics; a suffix store in memory only, which starts empty (not the user's
    project's, and not an earlier run's), and no suffix drafts unless a request asks: these
    benches send the same requests again (a warm-up, repeats), which the store would draft
    word for word. The engine bench and the agent replay measure suffix drafts, each repeat a
    session of its own."""
    command = [sys.executable, "-c", _MAIN, "serve", "--no-socket", "--no-auth", "--no-guard"]
    command += ["--no-suffix-store", "--no-suffix-drafts"]
    command += ["--metrics"] if watch else ["--no-history"]
    if parallel is not None:  # left to the server's own default unless asked for
        command += ["--parallel", str(parallel)]
    if prompt_hold is not None:
        command += ["--prompt-hold", f"{prompt_hold:g}"]
    command += ["--port", str(port), "--target", str(settings.target)]
    if settings.draft is not None:
        command += ["--draft", str(settings.draft)]
    command += ["--ctx-size", str(settings.n_ctx), "--threads", str(threads), "--spec", spec]
    if settings.draft_n_ctx is not None:
        command += ["--draft-ctx-size", str(settings.draft_n_ctx)]
    command += ["--gpu-layers", str(settings.target_gpu_layers)]
    command += ["--draft-gpu-layers", str(settings.draft_gpu_layers)]
    command += ["--flash-attn", settings.flash_attn]
    if settings.ubatch is not None:
        command += ["--ubatch-size", str(settings.ubatch)]
    return command + (["--mmap"] if settings.use_mmap else [])


def llama_server_command(
    binary: Path, settings: RuntimeSettings, threads: int, port: int, *, slots: int = 1
) -> list[str] | str:
    """llama-server without speculation, `--cache-reuse 256`, a batch of half the context,
    `slots` slots (`-np`; several share one KV buffer of the context's size, as llama-server's
    own default slots do, so no request gets less context than with one); or why this build
    cannot run the replay."""
    help_text = read_help(binary)
    if "--cache-reuse" not in help_text:
        return "this llama-server has no --cache-reuse"
    command = server_command(
        parse_mode("server-off"), binary, settings, threads=threads, help_text=help_text, port=port
    )
    if isinstance(command, str):
        return command
    if slots > 1:
        command[command.index("-np") + 1] = str(slots)
        if "--kv-unified" in help_text:
            command.append("--kv-unified")
    return [*command, "--cache-reuse", str(CACHE_REUSE), "-b", str(max(settings.n_ctx // 2, 1))]


def start_servers(
    settings: RuntimeSettings, options: EditorOptions, note: Callable[[str], None]
) -> tuple[list[ServerProcess], list[Skipped]]:
    """localspec serve, then llama-server if there is one; one that cannot start is skipped."""
    threads = settings.n_threads or default_threads()
    port = free_port()
    serve = localspec_command(
        settings,
        options.spec,
        threads,
        port,
        parallel=options.parallel,
        watch=options.watch is not None,
    )
    commands: list[tuple[str, list[str] | str, int]] = [(LOCALSPEC, serve, port)]
    if options.compare_ubatch is not None:
        port = free_port()
        other = replace(settings, ubatch=options.compare_ubatch)
        serve = localspec_command(
            other, options.spec, threads, port, parallel=options.parallel, watch=False
        )
        commands.append((f"{LOCALSPEC} -ub {options.compare_ubatch}", serve, port))
    if options.compare_prompt_hold is not None:
        port = free_port()
        hold = options.compare_prompt_hold
        serve = localspec_command(
            settings, options.spec, threads, port, parallel=options.parallel, prompt_hold=hold
        )
        commands.append((f"{LOCALSPEC} --prompt-hold {hold:g}", serve, port))
    skipped: list[Skipped] = []
    if options.llama_server is None:
        reason = "llama-server is not on PATH: pass --llama-server PATH to compare against it"
        skipped.append(Skipped(LLAMA_SERVER, reason))
    else:
        port = free_port()
        try:
            llama = llama_server_command(
                options.llama_server, settings, threads, port, slots=options.llama_slots
            )
        except (OSError, subprocess.SubprocessError) as exc:
            llama = f"cannot run {options.llama_server} --help: {exc}"
        commands.append((LLAMA_SERVER, llama, port))
    servers: list[ServerProcess] = []
    for name, command, server_port in commands:
        if isinstance(command, str):
            skipped.append(Skipped(name, command))
            continue
        note(f"starting {name}")
        server = ServerProcess(name, command, server_port)
        problem = server.wait_ready()
        if problem is None:
            servers.append(server)
        else:
            server.close()
            skipped.append(Skipped(name, problem))
    return servers, skipped


@contextlib.contextmanager
def running_servers(
    settings: RuntimeSettings, options: EditorOptions, note: Callable[[str], None]
) -> Iterator[tuple[list[ServerProcess], list[Skipped]]]:
    """`start_servers` for a bench that needs localspec (BenchServerError without it); every
    server is stopped on the way out."""
    servers, skipped = start_servers(settings, options, note)
    try:
        if not any(server.name == LOCALSPEC for server in servers):
            reason = next(s.reason for s in skipped if s.name == LOCALSPEC)
            raise BenchServerError(f"localspec serve did not start: {reason}")
        yield servers, skipped
    finally:
        for server in servers:
            if options.watch is not None and server.name == LOCALSPEC:
                _save_metrics(server, options.watch, note)
            server.close()


def _save_metrics(server: ServerProcess, path: Path, note: Callable[[str], None]) -> None:
    """The server's last /metrics scrape into `path` (a failure is noted, not raised: the
    bench's own results matter more)."""
    try:
        scrape = server.read("/metrics")
        # what the user works on, by route and model: theirs alone, as the history is
        with os.fdopen(open_private(path), "wb") as file:
            file.write(scrape)
    except (OSError, LocalspecError) as exc:
        note(f"could not save {server.name}'s /metrics to {path}: {exc}")


def prepared(body: dict[str, Any], *, t_max_prompt: bool) -> dict[str, Any]:
    """llama.vim's body as the bench sends it (see the module docstring for each change)."""
    sent = {k: v for k, v in body.items() if k not in ("samplers", "response_fields")}
    if not t_max_prompt:
        sent.pop("t_max_prompt_ms", None)
    sent.update(temperature=0.0, seed=0)
    return sent


def read_reply(answer: Any, seconds: float) -> Reply:
    """The figures of an /infill answer (llama-server's shape; localspec answers alike)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("timings"), dict):
        raise ValueError(f"an answer without timings: {str(answer)[:200]}")
    timings = answer["timings"]
    stats = answer.get("localspec")
    cut = isinstance(stats, dict) and bool(stats.get("prompt_cut"))
    return Reply(
        seconds=seconds,
        prompt_n=int(timings.get("prompt_n", 0)),
        cache_n=int(timings.get("cache_n", 0)),
        content=str(answer.get("content", "")),
        cut=cut,
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        predicted_n=int(timings.get("predicted_n", 0)),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
        draft_n=int(timings.get("draft_n", 0)),
        draft_accepted=int(timings.get("draft_n_accepted", 0)),
    )


def replay(
    requests: Sequence[EditorRequest],
    servers: Sequence[ServerProcess],
    options: EditorOptions,
    done: Callable[[int, EditorRequest, str, Reply], None],
) -> EditorResult:
    """Send every request to every server, taking turns; a server that fails is dropped."""
    result = EditorResult(list(requests))
    active = list(servers)
    for server in active:
        result.replies[server.name] = []
    for index, request in enumerate(requests):
        body = prepared(request.body, t_max_prompt=options.t_max_prompt)
        for server in active if index % 2 == 0 else active[::-1]:
            try:
                reply = read_reply(*server.post("/infill", body))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                why = f"request {index} failed: {failure_text(exc)}; log: {server.log_tail()}"
                result.skipped.append(Skipped(server.name, why))
                active.remove(server)
                del result.replies[server.name]
                continue
            result.replies[server.name].append(reply)
            done(index, request, server.name, reply)
    for server in active:
        result.idle_tokens[server.name] = idle_tokens(server)
    return result


def idle_tokens(server: ServerProcess) -> int:
    """What `server` processed outside any request so far (0 where it says nothing of it)."""
    try:
        health, _ = server.post("/health", None)
    except (OSError, ValueError):
        return 0
    value = health.get("idle_prompt_tokens", 0) if isinstance(health, dict) else 0
    return value if isinstance(value, int) else 0


def fim_prompts(runtime: Runtime, requests: Sequence[EditorRequest]) -> list[list[int]]:
    """Every request's prompt tokens as localspec's /infill builds them (for --numerics;
    the warm-ups' are those of the requests whose kind is WARMUP)."""
    prompts = []
    for request in requests:
        body = request.body
        extra = [ExtraChunk(chunk["filename"], chunk["text"]) for chunk in body["input_extra"]]
        built = runtime.prompts.infill_prompt(
            body["input_prefix"],
            body["input_suffix"],
            prompt=body["prompt"],
            extra=extra,
            max_tokens=body["n_predict"],
        )
        prompts.append(built.tokens)
    return prompts
